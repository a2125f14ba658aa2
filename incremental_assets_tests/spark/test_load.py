"""`run_incremental_load` without Dagster: a files table loaded, then loaded again from the state
the first load's result describes, as any caller would drive it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from incremental_assets.config import CursorSpec, FilesSourceSpec, LakeSpec, Mode, TableSpec
from incremental_assets.cursor import format_cursor
from incremental_assets.lake import open_lake
from incremental_assets.load import LoadRequest, run_incremental_load
from incremental_assets.results import LoadResult, StoredState
from incremental_assets_tests.support.project import read_lake


def _write(spark: SparkSession, folder: Path, ids: range, second: int) -> None:
    at = datetime(2025, 1, 1, 0, 0, second, tzinfo=UTC)
    rows = [(i, f"v{second}", at) for i in ids]
    spark.createDataFrame(rows, "id long, note string, at timestamp").write.mode("append").parquet(
        str(folder)
    )


def _stored(result: LoadResult) -> StoredState:
    """What a caller keeps of a load to start the next one from (Dagster keeps it as metadata)."""
    assert result.cursor_type is not None and result.cursor is not None
    return StoredState(
        cursor=format_cursor(result.cursor_type, result.cursor),
        cursor_column=result.cursor_column,
        cursor_type=result.cursor_type,
        batch=result.batch,
        run_id=None,
        row_count=result.row_count,
        lake_table_id=result.head.table_id if result.head else None,
        lake_commit=result.head.txn if result.head else None,
        settings=result.settings,
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
        spark, LoadRequest(table=table, lake=lake, stored=StoredState.initial())
    )
    _write(spark, landing, range(4, 8), second=2)  # two updates, two new keys
    second = run_incremental_load(spark, LoadRequest(table=table, lake=lake, stored=_stored(first)))

    assert (first.full_refresh, first.rows_written, first.row_count) == (True, 5, 5)
    assert second.full_refresh is False
    assert second.merge is not None and (second.merge.inserted, second.merge.updated) == (2, 2)
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
