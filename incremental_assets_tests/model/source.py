"""The source side: one real table, written the ways applications write tables.

`SourceTable` is what the machine drives; `source_postgres.py` (psycopg) and `source_mariadb.py`
(PyMySQL; MariaDB or MySQL) implement it for their database. What the two share lives here: the
values written, the columns a schema change may touch.

Every write goes through its own autocommit statement, except a `LateWriter`, whose transaction
stays open across runs and commits later. Nothing here predicts the lake: the machine reads back
what the database committed (`snapshot`) and the reference model works from that.

Cursor values: explicit types (bigint, numeric, text, date) take values from the model's frontier
(on MariaDB, text is respelled in case and trailing spaces, which its collation ignores); time
cursors are stamped by the database clock (`CLOCK`), and a tie copies the frontier's value exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import pyarrow as pa

from incremental_assets_tests.model.table import (
    CURSOR,
    DELETED,
    CursorValue,
    TableConfig,
    collated,
    frozen,
    next_cursor,
)
from incremental_assets_tests.support.mariadb import MariaDbServer
from incremental_assets_tests.support.postgres import PostgresServer

Row = dict[str, Any]
Key = tuple[Any, ...]
# Where a row is: its key; without one, a handle of the database's (PostgreSQL's ctid, or the
# row's values on MariaDB).
RowRef = Any
Server = PostgresServer | MariaDbServer

KEY_EPOCH = datetime(2025, 3, 30, 1, 0)  # Europe/Paris skips 02:00-03:00 that night
# Sparse bigint keys: snowflake ids (milliseconds since 2020-09-13 in the high bits, a sequence
# in the low 22), about 7e18; every fifth one negative; one far outlier (7) and the largest
# bigint among them.
SNOWFLAKE_EPOCH_MS = 1_600_000_000_000
OUTLIER, LARGEST = 7, 2**63 - 1


def sparse_id(ident: int) -> int:
    """The ident-th sparse 64-bit key (distinct for distinct idents up to 6,000)."""
    if ident == 2:
        return OUTLIER
    if ident == 3:
        return LARGEST
    snowflake = (SNOWFLAKE_EPOCH_MS + ident * 86_400_013) << 22 | (ident * 7919) % 4096
    return -snowflake if ident % 5 == 0 else snowflake


@dataclass(frozen=True)
class Clock:
    """The database clock as a cursor value: the statement's time (or, where the database has
    one, the transaction's start inside a late writer)."""

    in_transaction: bool
    with_zone: bool  # an instant (timestamptz); else UTC's wall clock (timestamp)


@dataclass(frozen=True)
class Snapshot:
    """The committed rows, as a fresh session sees them; the columns with their types (the
    database's spelling) and the type each must have in the lake (the README's type table)."""

    columns: dict[str, str]
    rows: tuple[Row, ...]
    lake_types: dict[str, pa.DataType]


@dataclass
class LateWriter:
    """A transaction held open across runs (see the README's *Late commits*)."""

    conn: Any  # the database's connection, with commit(), rollback() and close()
    # What the transaction cap keeps the cursor below: the transaction's start as the source
    # reads it (PostgreSQL: now(); MariaDB: innodb_trx.trx_started, to the second, less 1 s).
    started: datetime
    keys: set[Key] = field(default_factory=set)  # rows it inserted or locked by updating
    explicit: list[CursorValue] = field(default_factory=list)  # values not stamped by the clock


class SourceTable(ABC):
    """One source table of one example, in its own schema (PostgreSQL) or database (MariaDB)."""

    # Type spellings, as `columns` returns them: what a column widens and narrows to, the value
    # columns every table starts with, and the types of the drawn config's names.
    WIDER: ClassVar[dict[str, str]]
    # What a key column widens to where it differs (a negative key can't become unsigned).
    KEY_WIDER: ClassVar[dict[str, str]] = {}
    NARROWER: ClassVar[dict[str, str]]
    VALUE_COLUMNS: ClassVar[dict[str, str]]  # `note` is never dropped and changes on every write,
    # so two versions of a row always differ in it (a keyless row's identity rests on that)
    # The non-scalar value columns every table holds where `TableConfig.shapes`: name -> (type,
    # its value at the n-th write); those the database can send over Spark's reader.
    SHAPES: ClassVar[dict[str, tuple[str, Callable[[int], Any]]]] = {}
    TYPES: ClassVar[dict[str, str]]  # the config's type names (PostgreSQL's) -> this database's
    BOOLEAN: ClassVar[str]
    ADDED: ClassVar[tuple[str, str]]  # the types of added columns: text, integer
    # What the source can do: transactions left open (late commits), a lock that keeps a run's
    # reads waiting, a primary key a merge reads when the config names none; and whether its
    # rows hold maps (`reorder_maps`).
    TRANSACTIONS: ClassVar[bool] = True
    LOCKS: ClassVar[bool] = True
    KEY_FROM_TABLE: ClassVar[bool] = True
    MAPS: ClassVar[bool] = False

    def __init__(self, schema: str, config: TableConfig, source: dict[str, Any]) -> None:
        self.schema = schema
        self.config = config
        self.source = source  # the project's `sources:` entry
        self.serial = 0  # makes every written value unique
        self.next_key = 1
        self.added = 0
        self.defaulted: set[str] = set()  # columns added with a DEFAULT

    # -- what each database does -------------------------------------------------------------

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def columns(self) -> dict[str, str]:
        """Name -> type, in the table's order, spelled as the database spells it."""

    @abstractmethod
    def lake_type(self, kind: str) -> pa.DataType:
        """The type a column of this type has in the lake (the README's type table)."""

    @abstractmethod
    def settle(self) -> None:
        """Wait, before a run, until what the run would hold back by design has committed long
        enough ago (MariaDB's cap reads the clock a second early)."""

    @abstractmethod
    def rows(self) -> list[tuple[RowRef, Row]]:
        """(handle, row) of every committed row, the row as the model sees it."""

    @abstractmethod
    def create(self) -> None: ...

    @abstractmethod
    def insert(self, cursor: Any, key: dict[str, Any] | None = None, conn: Any = None) -> Row:
        """One new row (a new key unless `key` is given), as written."""

    @abstractmethod
    def update(
        self, where: Key | RowRef, cursor: Any, conn: Any = None, deleted: bool = False
    ) -> Row:
        """New values and cursor for one row (by key, or by handle without one); sets the delete
        flag as told (an update of a soft-deleted row brings it back). Returns the row written."""

    @abstractmethod
    def delete(self, where: Key | RowRef, conn: Any = None) -> None: ...

    @abstractmethod
    def duplicate(self, ref: RowRef, cursor: CursorValue) -> Row:
        """An exact copy of a row (keyless tables), with the cursor set to `cursor`."""

    @abstractmethod
    def open_writer(self) -> LateWriter:
        """A transaction that has started (the source's cap sees it) and holds no lock yet."""

    @abstractmethod
    def lock(self) -> Callable[[], None]:
        """A session holding the table exclusively, readers waiting; returns its release."""

    @abstractmethod
    def reader_waiting(self) -> bool:
        """Whether a session (a run's read) is waiting for a lock on the table."""

    @abstractmethod
    def _add_column(self, name: str, kind: str, default: str) -> None: ...

    @abstractmethod
    def drop_column(self, name: str) -> None: ...

    @abstractmethod
    def retype(self, name: str, kind: str) -> None: ...

    @abstractmethod
    def rename(self, old: str, new: str) -> None: ...

    @abstractmethod
    def set_primary_key(self, columns: tuple[str, ...]) -> None:
        """The table's primary key dropped and made anew on `columns`, in their order."""

    def reorder_maps(self) -> None:
        """Every row written again, its maps' entries in the reverse order (where `MAPS`)."""
        raise NotImplementedError(f"{type(self).__name__} holds no maps")

    def move(self, key: Key, values: dict[str, Any], conn: Any = None) -> Row:
        """The row at `key` given the key columns' `values` (its key changed), nothing else:
        the row written (the databases' tables)."""
        raise NotImplementedError(f"{type(self).__name__} changes no key in place")

    def truncate(self, conn: Any = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no TRUNCATE")

    def respell(self, value: Any) -> Any:
        """The value written for `value`: the same, or one the database holds equal to it."""
        return value

    # -- shared ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The committed rows, each value as the model holds it (`frozen`: arrays as tuples)."""
        columns = self.columns()
        rows = tuple({name: frozen(v) for name, v in row.items()} for _, row in self.rows())
        return Snapshot(columns, rows, {name: self.lake_type(k) for name, k in columns.items()})

    def key_of(self, row: Row) -> Key:
        """The row's key as the database compares keys (two spellings of one key are one)."""
        return tuple(collated(self.config, row[c]) for c in self.config.key)

    def live_rows(self) -> list[tuple[RowRef, Row]]:
        """Every committed row in a stable order (by key, else by cursor and note)."""
        pairs = self.rows()
        if self.config.keyed:
            return sorted(pairs, key=lambda p: self.key_of(p[1]))
        return sorted(
            pairs,
            key=lambda p: (collated(self.config, p[1][CURSOR]), p[1][CURSOR], p[1]["note"]),
        )

    def _key_values(self, n: int) -> dict[str, Any]:
        """The key columns of the n-th key: `id` unique alone, or (paired tables) in pairs told
        apart by `k2`; `k2` is n's parity either way, and never changes for a row."""
        ident = n // 2 + 1 if self.config.paired else n
        value: Any = ident
        if self.config.key_type == "numeric(12,0)":
            value = Decimal(ident)
        elif self.config.key_type == "text":
            value = f"k{ident:05d}"
        elif self.config.key_type == "timestamp":
            value = KEY_EPOCH + timedelta(minutes=17 * ident)  # 4, 5, 6: in the skipped hour
        elif self.config.key_type == "bigint":
            value = sparse_id(ident)
        return {"id": value, "k2": n % 2}

    def new_key(self) -> dict[str, Any]:
        values = self._key_values(self.next_key)
        self.next_key += 1
        return values

    def _fresh_values(self, columns: dict[str, str]) -> dict[str, Any]:
        """New values for every value column the table has now."""
        self.serial += 1
        n = self.serial
        values: dict[str, Any] = {"note": f"n{n:06d}"}
        if "qty" in columns:
            values["qty"] = n % 1000
        if "amount" in columns:
            values["amount"] = Decimal(n * 7 % 100_000)
        if "ratio" in columns:
            values["ratio"] = (n % 64) * 0.25  # exact in single and double precision
        if DELETED in columns:
            values[DELETED] = False
        for name, kind in columns.items():
            if name.startswith("x"):
                values[name] = f"x{n}" if kind == self.ADDED[0] else n
        values |= {name: shape(n) for name, (_, shape) in self.SHAPES.items() if name in columns}
        return values

    def cursor_for(self, frontier: CursorValue | None, bump: int, in_transaction: bool) -> Any:
        """The cursor value to write: a value, or (time cursors) the database clock."""
        if not self.config.time_cursor:
            return self.respell(next_cursor(self.config.cursor_type, frontier, bump))
        if bump == 0 and frontier is not None:
            return frontier
        return Clock(in_transaction, self.config.cursor_type == "timestamptz")

    def add_column(self, default: bool) -> str:
        self.added += 1
        name = f"x{self.added}"
        kind = self.ADDED[0] if self.added % 2 else self.ADDED[1]
        clause = ""
        if default:
            clause = " DEFAULT 'd'" if kind == self.ADDED[0] else " DEFAULT 7"
            self.defaulted.add(name)
        self._add_column(name, kind, clause)
        return f"{name} {kind}{clause}"

    def add_delete_flag(self) -> None:
        """The soft-delete flag column, false in every row (a table drawn without one)."""
        self._add_column(DELETED, f"{self.BOOLEAN} NOT NULL", " DEFAULT false")
        self.defaulted.add(DELETED)

    def droppable(self) -> list[str]:
        """Value columns a schema change may drop: never the key, the cursor, note or the flag,
        nor a column the config names in `columns:` or `exclude_columns:`."""
        named = {*self.config.exclude, *(self.config.listed or ())}
        keep = {*self.config.key, "k2", CURSOR, "note", DELETED, *named}
        return [name for name in self.columns() if name not in keep]

    def widenable(self, keys: bool) -> list[tuple[str, str]]:
        key_columns = set(self.config.key)
        wider = {**self.WIDER, **self.KEY_WIDER} if keys else self.WIDER
        return [
            (name, wider[kind])
            for name, kind in self.columns().items()
            if kind in wider and (name in key_columns) == keys and name != CURSOR
        ]

    def narrower(self, name: str) -> str | None:
        """The type a narrowing of the column would give it, if the machine narrows its type."""
        return self.NARROWER.get(self.columns().get(name, ""))

    def value_columns(self, config: TableConfig) -> dict[str, str]:
        """The value columns a table of this config starts with (the shapes too, if it says)."""
        shapes = {name: kind for name, (kind, _) in self.SHAPES.items()} if config.shapes else {}
        return {**self.VALUE_COLUMNS, **shapes}

    def column_types(self, config: TableConfig) -> list[str]:
        """The CREATE TABLE column definitions for the drawn configuration."""
        columns = []
        if config.keyed:
            columns.append(f"id {self.TYPES[config.key_type]} NOT NULL")
            columns.append(f"k2 {self.TYPES['integer']} NOT NULL")
        columns.append(f"{CURSOR} {self.TYPES[config.cursor_type]} NOT NULL")
        columns += [f"{name} {kind}" for name, kind in self.value_columns(config).items()]
        if config.soft_deletes:
            columns.append(f"{DELETED} {self.BOOLEAN} NOT NULL DEFAULT false")
        if config.keyed:
            columns.append(f"PRIMARY KEY ({', '.join(config.key)})")
        return columns
