"""The lake table as its readers see it (pyarrow for a plain Parquet folder, PyIceberg for an
Iceberg table), what PostgreSQL types become there, and the facts about it the model checks:
its layout (the plain format's file names, an Iceberg head snapshot's summary), its snapshots and
branches, an Iceberg table's format version and delete files, and what a run may not leave
behind."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets_tests.model.table import TABLE, frozen
from incremental_assets_tests.support.project import iceberg_table, read_lake

LAKE_FORMATS = ("parquet", "iceberg")
BATCH = "_batch"  # each row's batch: the run that wrote it
LAYOUTS = ("merge", "batches")  # rows matched on a key; batches (append and full_refresh)
CATALOG = "_catalog.db"  # the default Iceberg catalog, in the lake's root (SQLite, WAL)
# Where an Iceberg table keeps its data and delete files, under its folder (lake-format.md).
ICEBERG_DATA = "data"
# What a commit of this package writes into an Iceberg snapshot's summary (lake-format.md).
SUMMARY_TXN = "incremental-assets.txn"
SUMMARY_LAYOUT = "incremental-assets.layout"
# A snapshot that rewrote files without changing a row (compaction): the head is before it.
SAME_ROWS = "replace"
BRANCH_PREFIX = "ia-"  # a run's branch, `ia-<commit id>`, until main is moved to it
# Folders of the plain format's journaled commit: never in an Iceberg table's folder.
PLAIN_COMMIT_FOLDERS = ("_journal", "_staging")
# The PostgreSQL composite type the machine's tables hold (a column of it, and an array of it):
# over JDBC a composite value arrives as its text form, `(1,"x y")`.
COMPOSITE = "pair"


@dataclass(frozen=True)
class LakeState:
    """Rows (without the bookkeeping columns), data columns and their types, and the files."""

    rows: tuple[dict[str, Any], ...] = ()
    types: dict[str, pa.DataType] = field(default_factory=dict)
    batches: Counter[int] = field(default_factory=Counter)  # rows by their `_batch`
    # The files the table is made of: plain Parquet, the folder's data files; Iceberg, the data
    # and delete files of main's snapshot (paths under the table's folder).
    files: tuple[str, ...] = ()
    # Files whose schema differs from the first file's: plain readers would see one schema only.
    schema_mismatches: tuple[str, ...] = ()
    # Leftovers of runs: plain Parquet, anything in _journal/ and _staging/; Iceberg, those
    # folders themselves (its commits never make them).
    pending: tuple[str, ...] = ()
    # Why readers can't read the table at all (an Iceberg catalog naming metadata that is gone).
    unreadable: str | None = None
    # Whether there is a table at all: plain Parquet, data files; Iceberg, the catalog's entry
    # (a table keeps its schema, and its layout, with no row in it).
    exists: bool = False
    # What the table's rows are laid out for, `LAYOUTS`: plain Parquet, by its files' names (each
    # file's); Iceberg, by the summary of main's head snapshot.
    layouts: frozenset[str] = frozenset()
    # Iceberg: main's snapshot; its head (main's newest that isn't a compaction's) and the
    # snapshots since, which read as the head does; every snapshot the metadata keeps (time
    # travel), the branches runs made (`ia-<commit id>`) and the data and delete files in data/
    # that no kept snapshot references; all on disk there (paths under the table's folder).
    snapshot: int | None = None
    head: int | None = None
    since_head: frozenset[int] = frozenset()
    snapshots: frozenset[int] = frozenset()
    branches: frozenset[str] = frozenset()
    unreferenced: tuple[str, ...] = ()
    on_disk: frozenset[str] = frozenset()
    iceberg: bool = False  # the folder holds an Iceberg table (its metadata/)
    # Iceberg: the format version (3: deletion vectors); the delete files of main's snapshot
    # (among `files`), and which of them are deletion vectors (Puffin); each kept snapshot's
    # sequence number (the order of the table's commits), and main's ancestry from its snapshot
    # back (as far as its snapshots are kept: a table replaced whole starts a new one); files
    # in data/ that a kept snapshot references and that aren't on disk; the files main's head
    # snapshot added itself (a run's own commit: its data files and delete files), with what
    # each holds (`DATA`, `POSITIONS`, `VECTOR`, `EQUALITY`).
    format_version: int | None = None
    delete_files: frozenset[str] = frozenset()
    vectors: frozenset[str] = frozenset()
    sequence: dict[int, int] = field(default_factory=dict)
    ancestry: tuple[int, ...] = ()
    main_history: tuple[int, ...] = ()  # every snapshot main has been at (the snapshot log)
    missing: tuple[str, ...] = ()
    head_added: tuple[tuple[str, str], ...] = ()

    @property
    def columns(self) -> list[str]:
        return list(self.types)

    @property
    def holds_rows(self) -> bool:
        """Whether the table holds rows, as a run tells: plain Parquet, data files; Iceberg, rows
        its main snapshot reads as (a merge-on-read table whose rows were all deleted holds data
        files and delete files, and no row)."""
        return bool(self.rows) if self.iceberg else bool(self.files)

    def unchanged(self, other: LakeState) -> bool:
        """Whether `other` is this lake as readers see it: the same rows, files and snapshot."""
        return (self.files, self.rows, self.unreadable, self.snapshot) == (
            other.files,
            other.rows,
            other.unreadable,
            other.snapshot,
        )


def read_lake_state(lake_dir: Path) -> LakeState:
    """The table `TABLE` in the lake at `lake_dir`, in whichever format its folder holds."""
    table_dir = lake_dir / TABLE
    if (table_dir / "metadata").is_dir():
        return _iceberg_state(lake_dir)
    leftovers = [
        str(p.relative_to(table_dir))
        for sub in PLAIN_COMMIT_FOLDERS
        for p in (table_dir / sub).glob("*")
    ]
    files = tuple(sorted(p.name for p in table_dir.glob("part-*.parquet")))
    if not files:
        return LakeState(pending=tuple(sorted(leftovers)))
    # Names and types; Spark writes `_batch` NOT NULL in some files, which no reader minds.
    schemas = {name: _describe(pq.read_schema(table_dir / name)) for name in files}
    first = schemas[files[0]]
    mismatches = tuple(
        f"{name}: {schema} (but {files[0]}: {first})"
        for name, schema in schemas.items()
        if schema != first
    )
    table = read_lake(lake_dir, TABLE)
    types, rows, batches = _data(table)
    return LakeState(
        rows=rows,
        types=types,
        batches=batches,
        files=files,
        schema_mismatches=mismatches,
        pending=tuple(sorted(leftovers)),
        exists=True,
        layouts=frozenset("batches" if name.startswith("part-b") else "merge" for name in files),
    )


def _iceberg_state(lake_dir: Path) -> LakeState:
    """An Iceberg table read through its catalog: PyIceberg projects every data file onto the
    table's schema, the one schema its readers see (a file it can't project fails the read)."""
    table_dir = lake_dir / TABLE
    leftovers = tuple(sub for sub in PLAIN_COMMIT_FOLDERS if (table_dir / sub).exists())
    present = frozenset(
        str(p.relative_to(table_dir))
        for p in (table_dir / ICEBERG_DATA).rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    on_disk = frozenset(p for p in present if p.endswith((".parquet", ".puffin")))
    try:
        iceberg = iceberg_table(lake_dir, TABLE)
        table = _plain_strings(read_lake(lake_dir, TABLE))
    except Exception as exc:  # no entry; metadata gone; files the schema can't map
        return LakeState(
            pending=leftovers,
            unreadable=f"{type(exc).__name__}: {exc}",
            on_disk=on_disk,
            iceberg=True,
        )
    metadata = iceberg.metadata
    current = iceberg.current_snapshot()
    since_head = _since_head(metadata)
    main = _files(iceberg, table_dir, [current] if current else [])
    head = since_head[-1] if since_head else None
    head_added = _added(iceberg, table_dir, head) if head is not None else ()
    files = tuple(sorted(main))
    referenced = _files(iceberg, table_dir, metadata.snapshots)  # kept for time travel
    types, rows, batches = _data(table)
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    ancestry, at = [], metadata.current_snapshot_id
    while at is not None and at in by_id:
        ancestry.append(at)
        at = by_id[at].parent_snapshot_id
    return LakeState(
        rows=rows,
        types=types,
        batches=batches,
        files=files,
        pending=leftovers,
        exists=True,
        layouts=frozenset(_head_layout(metadata)),
        snapshot=None if current is None else current.snapshot_id,
        head=since_head[-1].snapshot_id if since_head else None,
        since_head=frozenset(s.snapshot_id for s in since_head),
        snapshots=frozenset(s.snapshot_id for s in metadata.snapshots),
        branches=frozenset(name for name in metadata.refs if name.startswith(BRANCH_PREFIX)),
        unreferenced=tuple(sorted(on_disk - set(referenced))),
        on_disk=on_disk,
        iceberg=True,
        format_version=int(metadata.format_version),
        delete_files=frozenset(path for path, kind in main.items() if kind != DATA),
        vectors=frozenset(path for path, kind in main.items() if kind == VECTOR),
        sequence={s.snapshot_id: int(s.sequence_number or 0) for s in metadata.snapshots},
        ancestry=tuple(ancestry),
        main_history=tuple(e.snapshot_id for e in metadata.snapshot_log),
        missing=tuple(sorted(p for p in referenced if p not in present and not _elsewhere(p))),
        head_added=head_added,
    )


def _since_head(metadata: Any) -> list[Any]:
    """Main's snapshots from the current one back to its head: the newest one that carries a
    commit of this package or changed rows (none but ours does on the model's lakes)."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    found, at = [], metadata.current_snapshot_id
    while at is not None and at in by_id:
        found.append(by_id[at])
        if SUMMARY_TXN in _summary(by_id[at]) or _operation(by_id[at]) != SAME_ROWS:
            return found
        at = by_id[at].parent_snapshot_id
    return found


def _head_layout(metadata: Any) -> list[str]:
    """The layout main's head says (none: no snapshot, or another writer's)."""
    since_head = _since_head(metadata)
    summary = _summary(since_head[-1]) if since_head else {}
    return [summary.get(SUMMARY_LAYOUT, "(no layout)")] if SUMMARY_TXN in summary else []


def _operation(snapshot: Any) -> str | None:
    operation = snapshot.summary.operation if snapshot.summary is not None else None
    return None if operation is None else str(operation.value)


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def _plain_strings(table: pa.Table) -> pa.Table:
    """Strings as `string`: PyIceberg reads them as `large_string` from a scan with no file."""
    fields = [f.with_type(pa.string()) if f.type == pa.large_string() else f for f in table.schema]
    return table.cast(pa.schema(fields))


# What a file a manifest lists holds: rows, a position-delete file's positions, a deletion
# vector (a Puffin blob: format v3), an equality-delete file's values.
DATA, POSITIONS, VECTOR, EQUALITY = "data", "position deletes", "deletion vector", "equality"
# The files each manifest lists, by its path, with what each holds and the snapshot that added
# it there (None: an existing file carried on): manifests are never rewritten in place.
_MANIFESTS: dict[str, tuple[tuple[str, str, int | None], ...]] = {}


def _listed(table: Any, table_dir: Path, manifest: Any) -> tuple[tuple[str, str, int | None], ...]:
    listed = _MANIFESTS.get(manifest.manifest_path)
    if listed is None:
        if len(_MANIFESTS) > 20_000:
            _MANIFESTS.clear()
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        listed = tuple(
            (
                _under(e.data_file.file_path, table_dir),
                _kind(e.data_file),
                e.snapshot_id if getattr(e.status, "name", "") == "ADDED" else None,
            )
            for e in entries
        )
        _MANIFESTS[manifest.manifest_path] = listed
    return listed


def _files(table: Any, table_dir: Path, snapshots: list[Any]) -> dict[str, str]:
    """The data and delete files the snapshots of a PyIceberg table reference, as paths under
    the table's folder (or whole, if elsewhere), with what each holds."""
    found: dict[str, str] = {}
    for snapshot in snapshots:
        for manifest in snapshot.manifests(table.io):
            found.update((path, kind) for path, kind, _ in _listed(table, table_dir, manifest))
    return found


def _added(table: Any, table_dir: Path, snapshot: Any) -> tuple[tuple[str, str], ...]:
    """The files `snapshot` added itself, with what each holds."""
    return tuple(
        sorted(
            (path, kind)
            for manifest in snapshot.manifests(table.io)
            for path, kind, added in _listed(table, table_dir, manifest)
            if added == snapshot.snapshot_id
        )
    )


def _kind(data_file: Any) -> str:
    content = getattr(data_file.content, "name", str(data_file.content))
    if content == "DATA":
        return DATA
    if content == "EQUALITY_DELETES":
        return EQUALITY
    return VECTOR if getattr(data_file.file_format, "name", "") == "PUFFIN" else POSITIONS


def _under(uri: str, table_dir: Path) -> str:
    path = Path(uri.removeprefix("file://").removeprefix("file:"))
    return str(path.relative_to(table_dir)) if path.is_relative_to(table_dir) else uri


def _elsewhere(path: str) -> bool:
    """Whether a referenced file lies outside the table's folder (`_under` kept it whole)."""
    return path.startswith("/") or "://" in path or path.startswith("file:")


def _data(
    table: pa.Table,
) -> tuple[dict[str, pa.DataType], tuple[dict[str, Any], ...], Counter[int]]:
    """The data columns' types (`canonical`), the rows without bookkeeping (`_batch`, and a
    collated text key's weight, `_weight_<key>`), each value as the model holds it (`held`), and
    how many rows each batch holds."""
    fields = {f.name: f.type for f in table.schema if not f.name.startswith("_")}
    rows = tuple(
        {k: held(v, fields[k]) for k, v in row.items() if k in fields} for row in table.to_pylist()
    )
    batches: Counter[int] = Counter()
    if BATCH in table.column_names:
        batches.update(b for b in table.column(BATCH).to_pylist() if b is not None)
    return {name: canonical(kind) for name, kind in fields.items()}, rows, batches


def held(value: Any, kind: pa.DataType) -> Any:
    """A value read from the lake as the model holds the source's (`frozen`): a list as a tuple,
    a struct or a map (pyarrow gives a map's entries as pairs, in the file's order) as its items
    sorted, all the way down."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return frozen({k: held(v, kind.item_type) for k, v in value})
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return tuple(held(v, kind.value_type) for v in value)
    if pa.types.is_struct(kind):
        return frozen({f.name: held(value[f.name], f.type) for f in kind})
    return value


def canonical(kind: pa.DataType) -> pa.DataType:
    """A type as the model compares types: strings and lists whatever their width, nested
    fields nullable and named as pyarrow names them (readers differ in both, not in the values)."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(canonical(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(canonical(kind.key_type), canonical(kind.item_type))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, canonical(f.type)) for f in kind])
    return kind


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def rows_at(lake_dir: Path, snapshot: int) -> tuple[dict[str, Any], ...]:
    """The rows of the Iceberg table `TABLE` as of `snapshot`, as a time-travelling reader
    reads them (PyIceberg), without the bookkeeping columns."""
    table = iceberg_table(lake_dir, TABLE).scan(snapshot_id=snapshot).to_arrow()
    return _data(_plain_strings(table))[1]


def copy_catalog(source: Path, target: Path) -> None:
    """The SQLite catalog at `source` written over `target` (created if need be) as one
    consistent state, through SQLite: its WAL may hold commits the main file doesn't yet, and
    other connections (Spark's, PyIceberg's) may have `target` open."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def copy_lake_table(lake_dir: Path, copy_dir: Path) -> None:
    """The table's folder, and the lake's catalog if it has one, copied into `copy_dir`."""
    shutil.copytree(lake_dir / TABLE, copy_dir / TABLE)
    if (lake_dir / CATALOG).exists():
        copy_catalog(lake_dir / CATALOG, copy_dir / CATALOG)


def as_read(lake_format: str, lake_type: pa.DataType) -> pa.DataType:
    """A column's lake type as the format's readers see it: Iceberg has no 8- or 16-bit integers,
    so its schema holds them as 32-bit ones (the Parquet files keep their own width)."""
    if lake_format == "iceberg" and lake_type in (pa.int8(), pa.int16()):
        return pa.int32()
    return lake_type


def arrow_type(pg_type: str) -> pa.DataType:
    """The README's type table, for the types the machine uses: an array (`integer[][]`: each
    `[]` a dimension, as `PostgresTable.columns` spells them) is a list of its elements' type, a
    composite type (`pair`) arrives as its text form."""
    if pg_type.endswith("[]"):
        return pa.list_(arrow_type(pg_type[:-2]))
    simple = {
        "smallint": pa.int16(),
        "integer": pa.int32(),
        "bigint": pa.int64(),
        "real": pa.float32(),
        "double precision": pa.float64(),
        "text": pa.string(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "timestamp without time zone": pa.timestamp("us"),
        "timestamp with time zone": pa.timestamp("us", tz="UTC"),
        COMPOSITE: pa.string(),
    }
    if pg_type in simple:
        return simple[pg_type]
    if pg_type.startswith("character varying"):
        return pa.string()
    if pg_type.startswith("numeric("):
        precision, scale = pg_type[len("numeric(") : -1].split(",")
        return pa.decimal128(int(precision), int(scale))
    raise ValueError(f"no lake type known for {pg_type}")
