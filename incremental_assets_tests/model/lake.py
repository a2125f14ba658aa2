"""The lake table as a plain pyarrow reader sees it, and what PostgreSQL types become there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets_tests.model.table import TABLE
from incremental_assets_tests.support.project import read_lake

BATCH = "_batch"


@dataclass(frozen=True)
class LakeState:
    """Rows (without the bookkeeping columns), data columns and their types, and the files."""

    rows: tuple[dict[str, Any], ...] = ()
    types: dict[str, pa.DataType] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    # Files whose schema differs from the first file's: plain readers would see one schema only.
    schema_mismatches: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()  # leftovers in _journal/ and _staging/

    @property
    def columns(self) -> list[str]:
        return list(self.types)


def read_lake_state(lake_dir: Path) -> LakeState:
    table_dir = lake_dir / TABLE
    files = tuple(sorted(p.name for p in table_dir.glob("part-*.parquet")))
    pending = tuple(
        sorted(
            str(p.relative_to(table_dir))
            for sub in ("_journal", "_staging")
            for p in (table_dir / sub).glob("*")
        )
    )
    if not files:
        return LakeState(pending=pending)
    # Names and types; Spark writes `_batch` NOT NULL in some files, which no reader minds.
    schemas = {name: _describe(pq.read_schema(table_dir / name)) for name in files}
    first = schemas[files[0]]
    mismatches = tuple(
        f"{name}: {schema} (but {files[0]}: {first})"
        for name, schema in schemas.items()
        if schema != first
    )
    table = read_lake(lake_dir, TABLE)
    # Bookkeeping: `_batch`, and a collated text key's weight (`_weight_<key>`).
    types = {f.name: f.type for f in table.schema if not f.name.startswith("_")}
    rows = tuple({k: v for k, v in row.items() if k in types} for row in table.to_pylist())
    return LakeState(rows, types, files, mismatches, pending)


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


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
