"""PostgreSQL types: each extracts exactly, or the run fails saying which column and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.harness import (
    Schema,
    lake_files,
    materialize,
    read_lake,
    write_project,
)

TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
    id int PRIMARY KEY,
    u uuid, j jsonb, ints int[], words text[], m mood, n numeric, b bytea, f boolean,
    early timestamptz, late timestamptz, early_local timestamp, old_day date
)
"""
ROW = (
    "1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2.5, \"x\"]}', '{1,2,NULL}', '{a,\"b c\"}', 'happy', "
    "12345678901234567890.123456789012345678, '\\x00ff10', true, '0001-01-01 00:00:00.000001+00', "
    "'9999-12-31 23:59:59.999999+00', '1000-06-15 12:00:00', '4713-01-01 BC'"
)


def _project(tmp_path: Path, pg: Schema) -> Any:
    entry = {
        "name": "items",
        "source": "shop",
        "table": f"{pg.name}.items",
        "mode": "merge",
        "cursor": "id",
        "primary_key": ["id"],
    }
    return write_project(
        tmp_path,
        {
            "lake": {"path": str(tmp_path / "lake")},
            "sources": {"shop": pg.source()},
            "tables": [entry],
        },
    )


def test_every_type_arrives_exactly(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(*TYPES.strip().split(";\n"))
    pg.execute(f"INSERT INTO items VALUES ({ROW})")

    run = materialize(_project(tmp_path, pg), "items", instance, spark_resource)

    assert run.success, run.failure
    lake = read_lake(tmp_path / "lake", "items")
    row = lake.drop_columns(["old_day"]).to_pylist()[0]
    assert row["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert json.loads(row["j"]) == {"k": [1, 2.5, "x"]}
    assert row["ints"] == [1, 2, None] and row["words"] == ["a", "b c"]
    assert row["m"] == "happy"
    assert row["n"] == Decimal("12345678901234567890.123456789012345678")
    assert row["b"] == b"\x00\xff\x10" and row["f"] is True
    assert row["early"] == datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert row["late"] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert row["early_local"] == datetime(1000, 6, 15, 12)
    # 4713 BC (year -4712, proleptic Gregorian in both PostgreSQL and Parquet), as days since 1970.
    assert lake["old_day"].cast(pa.int32()).to_pylist() == [
        pg.query("SELECT old_day - DATE '1970-01-01' FROM items")[0][0]
    ]


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (
            "n",
            "0.1234567890123456789012",
            "column 'n' of table 'items' holds 0.1234567890123456789012, which needs more digits than decimal(38,18)",
        ),
        ("early", "'infinity'", "holds a value Spark can't store (PostgreSQL 'infinity'"),
        ("early_local", "'-infinity'", "holds a value Spark can't store (PostgreSQL 'infinity'"),
    ],
)
def test_values_the_lake_cannot_hold_fail_clearly_and_write_nothing(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    column: str,
    value: str,
    message: str,
) -> None:
    pg.execute(*TYPES.strip().split(";\n"))
    pg.execute(f"INSERT INTO items (id, {column}) VALUES (1, {value})")

    run = materialize(_project(tmp_path, pg), "items", instance, spark_resource)

    assert not run.success
    assert "Table 'items'" in (run.failure or "")
    assert message in (run.failure or "")
    assert lake_files(tmp_path / "lake", "items") == []
