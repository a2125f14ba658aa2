"""The example's table as a folder of Parquet files, the one source that carries maps and arrays of
structs: a files source (`type: files`) read by Spark.

One file per row, written with pyarrow, plus one file with no row (`EMPTY`), so that Spark finds
the schema in a folder whose rows are all gone. An update or a delete replaces or removes the
row's file; an update writes a file of another name, as an export does (a file rewritten in place
under its name is a documented blind spot of the nothing-new check). A schema change rewrites
every file, as a new export would: Spark takes the schema from one file.

Types are spelled as Spark's DDL spells them. Besides the shared value columns, every table holds
`SHAPES`: a map, an array of structs, and a struct holding a map. A map's entries are written in
one order or the reverse, in turn, and `reorder_maps` writes every file again with its maps'
entries reversed and nothing else changed: the same rows, which a merge must not count as
changes. Time cursors are stamped by this process's clock (the product's clock for files too).
Files have no transactions, no locks and no primary key of their own (`TRANSACTIONS`, `LOCKS`,
`KEY_FROM_TABLE`).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets_tests.model.source import Clock, Key, LateWriter, Row, SourceTable
from incremental_assets_tests.model.table import CURSOR, DELETED, TABLE, TableConfig

EMPTY = "part-0-empty.parquet"  # the file with the schema and no row
_SIMPLE = {
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp_ntz": pa.timestamp("us"),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "map<string,int>": pa.map_(pa.string(), pa.int32()),
    "array<struct<a:int,b:string>>": pa.list_(
        pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])
    ),
    "struct<tags:map<string,string>,n:int>": pa.struct(
        [pa.field("tags", pa.map_(pa.string(), pa.string())), pa.field("n", pa.int32())]
    ),
}


def _attrs(n: int) -> dict[str, int | None] | None:
    """A map with a NULL value, empty, or NULL."""
    if n % 5 == 0:
        return None
    return {} if n % 5 == 1 else {"a": n, f"k{n % 3}": -n, "z": None}


def _items(n: int) -> list[dict[str, Any]] | None:
    """An array of structs, one of them NULL in every field, or one struct, or empty. Never
    NULL itself: PyIceberg (0.12, which the model reads Iceberg tables with) reads a NULL
    array of structs as an empty one (apache/iceberg-python#3833), though the file Spark wrote
    holds the NULL."""
    if n % 4 == 0:
        return [{"a": None, "b": f"only {n}"}]
    return [] if n % 4 == 1 else [{"a": n, "b": f"i {n}"}, {"a": None, "b": None}]


def _meta(n: int) -> dict[str, Any] | None:
    """A struct holding a map."""
    if n % 6 == 0:
        return None
    return {"tags": {"x": f"v{n}", "b": "w", "m": None}, "n": n}


# The non-scalar columns: name -> (type, its value at the n-th write).
SHAPES: dict[str, tuple[str, Callable[[int], Any]]] = {
    "attrs": ("map<string,int>", _attrs),
    "items": ("array<struct<a:int,b:string>>", _items),
    "meta": ("struct<tags:map<string,string>,n:int>", _meta),
}


@dataclass(frozen=True)
class FilesRoot:
    """Where the examples' landing folders go: the files source's `server`."""

    path: Path


class FilesTable(SourceTable):
    WIDER: ClassVar[dict[str, str]] = {
        "int": "bigint",
        "bigint": "decimal(20,0)",
        "decimal(12,0)": "decimal(20,0)",
        "float": "double",
    }
    NARROWER: ClassVar[dict[str, str]] = {"bigint": "int", "int": "smallint"}
    VALUE_COLUMNS: ClassVar[dict[str, str]] = {
        "note": "string NOT NULL",
        "qty": "int",
        "amount": "decimal(12,0)",
        "ratio": "float",
    }
    SHAPES = SHAPES
    TYPES: ClassVar[dict[str, str]] = {
        "integer": "int",
        "bigint": "bigint",
        "numeric(12,0)": "decimal(12,0)",
        "numeric(12,2)": "decimal(12,2)",
        "text": "string",
        "date": "date",
        "timestamp": "timestamp_ntz",
        "timestamptz": "timestamp",
    }
    BOOLEAN = "boolean"
    ADDED = ("string", "int")
    TRANSACTIONS = LOCKS = KEY_FROM_TABLE = False
    MAPS = True

    def __init__(self, root: Path, schema: str, config: TableConfig) -> None:
        """The table's folder is `<schema>.t` under `root`, as the config's `table:` names it."""
        super().__init__(schema, config, {"type": "files", "path": str(root)})
        self.folder = root / f"{schema}.{TABLE}"
        self.kinds: dict[str, str] = {}
        self.data: dict[str, Row] = {}  # file name -> its row
        self.flip = False  # the order the next file's map entries are written in

    def close(self) -> None:
        return None

    # -- reading -----------------------------------------------------------------------------

    def columns(self) -> dict[str, str]:
        return dict(self.kinds)

    def lake_type(self, kind: str) -> pa.DataType:
        if kind in _SIMPLE:
            return _SIMPLE[kind]
        if kind.startswith("decimal("):
            precision, scale = kind[len("decimal(") : -1].split(",")
            return pa.decimal128(int(precision), int(scale))
        raise ValueError(f"no lake type known for {kind}")

    def settle(self) -> None:
        return None

    def rows(self) -> list[tuple[Any, Row]]:
        return [(name, dict(row)) for name, row in self.data.items()]

    # -- the files ---------------------------------------------------------------------------

    def _schema(self) -> pa.Schema:
        return pa.schema([pa.field(name, self.lake_type(k)) for name, k in self.kinds.items()])

    def _entries(self, value: Any, kind: pa.DataType) -> Any:
        """A value as pyarrow takes it: a map as its entries, in the order of the moment."""
        if value is None:
            return None
        if pa.types.is_map(kind):
            pairs = [(k, self._entries(v, kind.item_type)) for k, v in value.items()]
            return pairs[::-1] if self.flip else pairs
        if pa.types.is_list(kind):
            return [self._entries(v, kind.value_type) for v in value]
        if pa.types.is_struct(kind):
            return {f.name: self._entries(value.get(f.name), f.type) for f in kind}
        return value

    def _write(self, name: str, rows: list[Row]) -> None:
        schema = self._schema()
        columns = {
            f.name: pa.array([self._entries(row.get(f.name), f.type) for row in rows], f.type)
            for f in schema
        }
        pq.write_table(pa.table(columns, schema=schema), self.folder / name)
        self.flip = not self.flip

    def _add(self, row: Row) -> Row:
        name = f"part-{uuid.uuid4().hex}.parquet"
        self.data[name] = row
        self._write(name, [row])
        return row

    def _remove(self, name: str) -> None:
        del self.data[name]
        (self.folder / name).unlink()

    def _rewrite_all(self) -> None:
        """Every file written again, under a new name, as the schema now is."""
        rows = list(self.data.values())
        for name in list(self.data):
            self._remove(name)
        self._write(EMPTY, [])
        for row in rows:
            self._add(row)

    def reorder_maps(self) -> None:
        """Every row written again with its maps' entries in the reverse order: the same rows."""
        self._rewrite_all()

    # -- writes ------------------------------------------------------------------------------

    def create(self) -> None:
        self.folder.mkdir(parents=True)
        for definition in self.column_types(self.config):
            name, _, kind = definition.partition(" ")
            if name != "PRIMARY":
                self.kinds[name] = _bare(kind)
        self._write(EMPTY, [])

    def _row(self, values: dict[str, Any], cursor: Any) -> Row:
        """A full row in the columns' order: the cursor (the clock, if it says so), the values
        given, NULL in the other columns."""
        if isinstance(cursor, Clock):
            stamp = datetime.now(UTC)
            cursor = stamp if cursor.with_zone else stamp.replace(tzinfo=None)
        given = {CURSOR: cursor, **values}
        return {name: given.get(name) for name in self.kinds}

    def insert(self, cursor: Any, key: dict[str, Any] | None = None, conn: Any = None) -> Row:
        values = self._fresh_values(self.columns())
        if self.config.keyed:
            values = {**(key or self.new_key()), **values}
        return self._add(self._row(values, cursor))

    def _find(self, where: Key | str) -> str:
        if isinstance(where, str):
            return where
        found = [name for name, row in self.data.items() if self.key_of(row) == where]
        assert len(found) == 1, f"{len(found)} files hold the key {where!r}"
        return found[0]

    def update(self, where: Key | str, cursor: Any, conn: Any = None, deleted: bool = False) -> Row:
        name = self._find(where)
        row = self.data[name]
        values = self._fresh_values(self.columns())
        if DELETED in values:
            values[DELETED] = deleted
        keys: dict[str, Any] = {c: row[c] for c in ("id", "k2") if c in row}
        self._remove(name)
        return self._add(self._row({**keys, **values}, cursor))

    def delete(self, where: Key | str, conn: Any = None) -> None:
        self._remove(self._find(where))

    def duplicate(self, ref: str, cursor: Any) -> Row:
        values = {name: value for name, value in self.data[ref].items() if name != CURSOR}
        return self._add(self._row(values, cursor))

    def open_writer(self) -> LateWriter:
        raise NotImplementedError("files have no transactions (TRANSACTIONS is false)")

    def lock(self) -> Callable[[], None]:
        raise NotImplementedError("files have no locks (LOCKS is false)")

    def reader_waiting(self) -> bool:
        return False

    # -- schema changes: every file written again --------------------------------------------

    def _add_column(self, name: str, kind: str, default: str) -> None:
        self.kinds[name] = _bare(kind)
        value = _default(default)
        for row in self.data.values():
            row[name] = value
        self._rewrite_all()

    def drop_column(self, name: str) -> None:
        del self.kinds[name]
        for row in self.data.values():
            row.pop(name, None)
        self._rewrite_all()

    def retype(self, name: str, kind: str) -> None:
        self.kinds[name] = kind
        if kind.startswith("decimal("):
            for row in self.data.values():
                row[name] = None if row[name] is None else Decimal(row[name])
        self._rewrite_all()

    def rename(self, old: str, new: str) -> None:
        self.kinds = {new if name == old else name: kind for name, kind in self.kinds.items()}
        for name, row in self.data.items():
            self.data[name] = {new if c == old else c: v for c, v in row.items()}
        self._rewrite_all()

    def set_primary_key(self, columns: tuple[str, ...]) -> None:
        return None  # files have no key of their own: only the config names one


def _bare(definition: str) -> str:
    """The type of a column definition (`boolean NOT NULL DEFAULT false`: boolean)."""
    return definition.split(" NOT NULL")[0].split(" DEFAULT")[0]


def _default(clause: str) -> Any:
    """The value a ` DEFAULT ...` clause gives existing rows (None without one)."""
    text = clause.strip().removeprefix("DEFAULT").strip()
    if not text:
        return None
    if text in ("true", "false"):
        return text == "true"
    return text.strip("'") if text.startswith("'") else int(text)


@contextmanager
def open_files_table(root: FilesRoot, config: TableConfig) -> Iterator[FilesTable]:
    """The example's table in a folder of its own under `root`, removed at the end."""
    table = FilesTable(root.path, f"landing_{uuid.uuid4().hex[:10]}", config)
    try:
        table.create()
        yield table
    finally:
        shutil.rmtree(table.folder, ignore_errors=True)
