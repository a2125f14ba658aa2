"""The lake table as its readers see it (pyarrow for a plain Parquet folder, PyIceberg for an
Iceberg table), what PostgreSQL types become there, and the lake's layout by its files' names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets_tests.model.table import TABLE
from incremental_assets_tests.support.project import iceberg_table, read_lake

LAKE_FORMATS = ("parquet", "iceberg")
# Where an Iceberg table keeps its data files, under its folder (the README's lake layout).
ICEBERG_DATA = "data"


@dataclass(frozen=True)
class LakeState:
    """Rows (without the bookkeeping columns), data columns and their types, and the files."""

    rows: tuple[dict[str, Any], ...] = ()
    types: dict[str, pa.DataType] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the data files the table is made of (Iceberg: its snapshot's)
    # Files whose schema differs from the first file's: plain readers would see one schema only.
    schema_mismatches: tuple[str, ...] = ()
    # Leftovers of runs: anything in _journal/ and _staging/, and (Iceberg) data files that no
    # snapshot references.
    pending: tuple[str, ...] = ()
    # Why readers can't read the table at all (an Iceberg catalog naming metadata that is gone).
    unreadable: str | None = None

    @property
    def columns(self) -> list[str]:
        return list(self.types)

    def layouts(self) -> set[str]:
        """What the files hold, by their names: `batch` (append, full_refresh), `bucket` (merge)."""
        return {"batch" if name.startswith("part-b") else "bucket" for name in self.files}


def read_lake_state(lake_dir: Path) -> LakeState:
    """The table `TABLE` in the lake at `lake_dir`, in whichever format its folder holds."""
    table_dir = lake_dir / TABLE
    leftovers = [
        str(p.relative_to(table_dir))
        for sub in ("_journal", "_staging")
        for p in (table_dir / sub).glob("*")
    ]
    if (table_dir / "metadata").is_dir():
        return _iceberg_state(lake_dir, leftovers)
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
    return _state(read_lake(lake_dir, TABLE), files, mismatches, leftovers)


def _iceberg_state(lake_dir: Path, leftovers: list[str]) -> LakeState:
    """An Iceberg table read through its catalog: PyIceberg projects every data file onto the
    table's schema, the one schema its readers see (a file it can't project fails the read)."""
    try:
        iceberg = iceberg_table(lake_dir, TABLE)
        table = _plain_strings(read_lake(lake_dir, TABLE))
    except (OSError, ValueError) as exc:  # metadata gone; files the schema can't map
        return LakeState(
            pending=tuple(sorted(leftovers)), unreadable=f"{type(exc).__name__}: {exc}"
        )
    current = iceberg.current_snapshot()
    files = tuple(sorted(_data_files(iceberg, [current] if current else [])))
    referenced = _data_files(iceberg, iceberg.metadata.snapshots)  # kept for time travel
    unreferenced = [
        f"{ICEBERG_DATA}/{p.name}"
        for p in (lake_dir / TABLE / ICEBERG_DATA).glob("*.parquet")
        if p.name not in referenced
    ]
    return _state(table, files, (), [*leftovers, *unreferenced])


def _plain_strings(table: pa.Table) -> pa.Table:
    """Strings as `string`: PyIceberg reads them as `large_string` from a scan with no file."""
    fields = [f.with_type(pa.string()) if f.type == pa.large_string() else f for f in table.schema]
    return table.cast(pa.schema(fields))


def _data_files(table: Any, snapshots: list[Any]) -> set[str]:
    """The names of the data files the snapshots of a PyIceberg table reference."""
    return {
        Path(entry.data_file.file_path).name
        for snapshot in snapshots
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }


def _state(
    table: pa.Table, files: tuple[str, ...], mismatches: tuple[str, ...], leftovers: list[str]
) -> LakeState:
    # Bookkeeping: `_batch`, and a collated text key's weight (`_weight_<key>`).
    types = {f.name: f.type for f in table.schema if not f.name.startswith("_")}
    rows = tuple({k: v for k, v in row.items() if k in types} for row in table.to_pylist())
    return LakeState(rows, types, files, mismatches, tuple(sorted(leftovers)))


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def as_read(lake_format: str, lake_type: pa.DataType) -> pa.DataType:
    """A column's lake type as the format's readers see it: Iceberg has no 8- or 16-bit integers,
    so its schema holds them as 32-bit ones (the Parquet files keep their own width)."""
    if lake_format == "iceberg" and lake_type in (pa.int8(), pa.int16()):
        return pa.int32()
    return lake_type


def arrow_type(pg_type: str) -> pa.DataType:
    """The README's type table, for the types the machine uses."""
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
    }
    if pg_type in simple:
        return simple[pg_type]
    if pg_type.startswith("character varying"):
        return pa.string()
    if pg_type.startswith("numeric("):
        precision, scale = pg_type[len("numeric(") : -1].split(",")
        return pa.decimal128(int(precision), int(scale))
    raise ValueError(f"no lake type known for {pg_type}")
