"""`run_incremental_load` without Dagster: a files table loaded, then loaded again from the state
the first load's result describes, as any caller would drive it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from incremental_assets.config import CursorSpec, FilesSourceSpec, LakeSpec, Mode, TableSpec
from incremental_assets.lake import open_lake
from incremental_assets.load import LoadRequest, run_incremental_load
from incremental_assets.metadata import state_after
from incremental_assets.results import StoredState
from incremental_assets_tests.support.project import read_lake


def _write(spark: SparkSession, folder: Path, ids: range, second: int) -> None:
    at = datetime(2025, 1, 1, 0, 0, second, tzinfo=UTC)
    rows = [(i, f"v{second}", at) for i in ids]
    spark.createDataFrame(rows, "id long, note string, at timestamp").write.mode("append").parquet(
        str(folder)
    )


@pytest.mark.parametrize("lake_format", ["parquet", "iceberg"])
def test_a_files_table_loads_incrementally_without_dagster(
    spark: SparkSession, tmp_path: Path, lake_format: str
) -> None:
    landing = tmp_path / "landing" / "orders"
    _write(spark, landing, range(1, 6), second=1)
    table = TableSpec(
        name="orders",
        source=FilesSourceSpec(name="landing", path=str(tmp_path / "landing")),
        mode=Mode.MERGE,
        table="orders",
        cursor=CursorSpec(column="at"),
        primary_key=("id",),
    )
    lake = LakeSpec(path=str(tmp_path / "lake"), format=lake_format)

    first = run_incremental_load(
        spark, LoadRequest(table=table, lake_spec=lake, stored=StoredState.initial())
    )
    _write(spark, landing, range(4, 8), second=2)  # two updates, two new keys
    second = run_incremental_load(
        spark, LoadRequest(table=table, lake_spec=lake, stored=state_after(first))
    )

    assert (first.full_refresh, first.written.rows_written, first.row_count) == (True, 5, 5)
    assert second.full_refresh is False
    merged = second.written.merge
    assert merged is not None and (merged.inserted, merged.updated) == (2, 2)
    assert second.previous_cursor == first.cursor
    rows = read_lake(tmp_path / "lake", "orders").select(["id", "note"]).to_pylist()
    assert sorted((r["id"], r["note"]) for r in rows) == [
        (1, "v1"),
        (2, "v1"),
        (3, "v1"),
        (4, "v2"),
        (5, "v2"),
        (6, "v2"),
        (7, "v2"),
    ]
    assert open_lake(lake, "orders").facts().head == second.head
