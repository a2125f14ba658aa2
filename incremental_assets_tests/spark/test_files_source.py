"""The files source: bounds frozen over the files, the window pushed into the Parquet scan."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from incremental_assets.config import CursorSpec, FilesSourceSpec, Mode, TableSpec
from incremental_assets.cursor import CursorType
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.files import FilesSource
from incremental_assets.window import Window


def _source(spark: SparkSession, root: Path) -> FilesSource:
    spec = FilesSourceSpec(name="landing", path=str(root), format="parquet")
    table = TableSpec(
        name="events", source=spec, mode=Mode.APPEND, table="events", cursor=CursorSpec(column="at")
    )
    return FilesSource(spark, table)


def _seed(spark: SparkSession, root: Path) -> None:
    rows = [(i, datetime(2025, 1, 1, 0, 0, i, tzinfo=UTC)) for i in range(10)]
    spark.createDataFrame(rows, "id long, at timestamp").write.parquet(str(root / "events"))


def test_bounds_are_frozen_from_the_files(spark: SparkSession, tmp_path: Path) -> None:
    _seed(spark, tmp_path)
    source = _source(spark, tmp_path)
    cursor = Cursor("at", CursorType.TIMESTAMPTZ)

    lower = datetime(2025, 1, 1, 0, 0, 5, tzinfo=UTC)
    bounds = source.freeze(FreezeRequest(cursor=cursor, lower=lower, timezone="UTC"))

    assert bounds.upper == datetime(2025, 1, 1, 0, 0, 9, tzinfo=UTC)
    assert bounds.rows == 5


def test_the_window_is_pushed_into_the_parquet_scan(spark: SparkSession, tmp_path: Path) -> None:
    _seed(spark, tmp_path)
    source = _source(spark, tmp_path)
    window = Window(
        "at",
        CursorType.TIMESTAMPTZ,
        datetime(2025, 1, 1, 0, 0, 3, tzinfo=UTC),
        datetime(2025, 1, 1, 0, 0, 6, tzinfo=UTC),
    )

    frame = source.read(window, None, None)

    spark.conf.set("spark.sql.maxMetadataStringLength", "1000")  # don't elide the filter list
    try:
        plan = frame._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    pushed = plan.split("PushedFilters: [", 1)[1].split("]", 1)[0]
    assert "GreaterThanOrEqual(at,2025-01-01 00:00:03.0)" in pushed
    assert "LessThanOrEqual(at,2025-01-01 00:00:06.0)" in pushed
    assert sorted(r.id for r in frame.collect()) == [3, 4, 5, 6]
