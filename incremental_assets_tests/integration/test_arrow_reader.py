"""The Arrow reader (`reader: arrow`) lands exactly what the JDBC reader lands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.harness import (
    Schema,
    lake_files,
    materialize,
    read_lake,
    write_project,
)

TYPES = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    """CREATE TABLE items (
        id int PRIMARY KEY, u uuid, j jsonb, ints int[], m mood, amount numeric(12, 2), n numeric, b bytea,
        f boolean, early timestamptz, local_time timestamp, day date, at timestamptz NOT NULL)""",
    """INSERT INTO items SELECT i, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2.5]}', ARRAY[i, NULL],
        'happy', i * 1.25, 12345678901234567890.123456789012345678, '\\x00ff', i % 2 = 0,
        '0001-01-01 00:00:00.000001+00', '2025-03-30 02:30:00.5', '4713-01-01 BC',
        TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 minute' FROM generate_series(1, 500) i""",
]


def _config(tmp_path: Path, pg: Schema, reader: str, **table: Any) -> dict[str, Any]:
    entry = {
        "name": f"items_{reader}",
        "source": reader,
        "table": f"{pg.name}.items",
        "mode": "merge",
        "cursor": "at",
        "primary_key": ["id"],
        "transaction_cap": False,
        **table,
    }
    sources = {
        r: pg.source(reader=r, rows_per_partition=100, max_partitions=3) for r in ("jdbc", "arrow")
    }
    return {"lake": {"path": str(tmp_path / "lake")}, "sources": sources, "tables": [entry]}


def test_both_readers_land_the_same_rows_and_types(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(*TYPES)
    runs = {}
    for reader in ("jdbc", "arrow"):
        project = write_project(tmp_path / reader, _config(tmp_path, pg, reader))
        runs[reader] = materialize(project, f"items_{reader}", instance, spark_resource)

    assert all(run.success for run in runs.values()), {r: run.failure for r, run in runs.items()}
    jdbc, arrow = (
        read_lake(tmp_path / "lake", f"items_{r}").sort_by("id") for r in ("jdbc", "arrow")
    )
    assert arrow.drop_columns(["_batch"]).equals(jdbc.drop_columns(["_batch"]))
    assert runs["arrow"].metadata["cursor"] == runs["jdbc"].metadata["cursor"]
    assert arrow.num_rows == 500


def test_the_arrow_reader_splits_on_the_cursor_and_refuses_values_it_cannot_keep(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(*TYPES)
    pg.execute("INSERT INTO items (id, n, at) VALUES (501, 0.1234567890123456789012, now())")
    project = write_project(tmp_path, _config(tmp_path, pg, "arrow"))

    run = materialize(project, "items_arrow", instance, spark_resource)

    assert not run.success
    assert (
        "column 'n' of table 'items_arrow' holds a value decimal128(38, 18) can't keep exactly"
        in (run.failure or "")
    )
    assert lake_files(tmp_path / "lake", "items_arrow") == []


@pytest.mark.parametrize("jvm_zone", ["America/New_York"])
def test_arrow_values_ignore_the_jvm_and_session_zones(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    jvm_zone: str,
) -> None:
    pg.execute(*TYPES)
    spark = spark_resource.spark_session
    zone = spark._jvm.java.util.TimeZone  # type: ignore[union-attr]
    saved, saved_session = zone.getDefault(), spark.conf.get("spark.sql.session.timeZone")
    zone.setDefault(zone.getTimeZone(jvm_zone))
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kathmandu")
    try:
        run = materialize(
            write_project(tmp_path, _config(tmp_path, pg, "arrow")),
            "items_arrow",
            instance,
            spark_resource,
        )
    finally:
        zone.setDefault(saved)
        spark.conf.set("spark.sql.session.timeZone", saved_session)

    assert run.success, run.failure
    row = (
        read_lake(tmp_path / "lake", "items_arrow")
        .sort_by("id")
        .slice(0, 1)
        .drop_columns(["day"])
        .to_pylist()[0]
    )
    assert str(row["local_time"]) == "2025-03-30 02:30:00.500000"
    assert str(row["early"]) == "0001-01-01 00:00:00.000001+00:00"
