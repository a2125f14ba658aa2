"""The checks on results a correct load never returns: each must be able to fail."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from incremental_assets.checks import cursor_not_backwards, primary_key_unique
from incremental_assets.cursor import CursorType
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import LoadResult, StoredState
from incremental_assets_tests.support.load_results import load_result
from incremental_assets_tests.support.specs import table_on

JANUARY = datetime(2025, 1, 1, tzinfo=UTC)


def _stored(cursor: str, column: str = "updated_at", kind: CursorType | None = None) -> StoredState:
    return StoredState(
        cursor=cursor,
        cursor_column=column,
        cursor_type=kind or CursorType.TIMESTAMPTZ,
        batch=3,
        run_id="run-1",
    )


@pytest.mark.parametrize(
    ("full_refresh", "severity"),
    [(False, dg.AssetCheckSeverity.ERROR), (True, dg.AssetCheckSeverity.WARN)],
)
def test_a_cursor_below_the_stored_one_fails(
    full_refresh: bool, severity: dg.AssetCheckSeverity
) -> None:
    result = load_result(cursor=JANUARY, full_refresh=full_refresh)
    check = cursor_not_backwards(
        table_on("postgres"), result, _stored("2025-02-01T00:00:00.000000+00:00")
    )
    assert not check.passed and check.severity == severity
    assert check.metadata["previous_cursor"].value == "2025-02-01T00:00:00.000000+00:00"


@pytest.mark.parametrize(
    ("result", "stored", "reason"),
    [
        (
            load_result(cursor=JANUARY, full_refresh=False),
            _stored("2025-02-01T00:00:00.000000+00:00", column="created_at"),
            "column created_at",
        ),
        (
            load_result(cursor="aa", cursor_type=CursorType.STRING, full_refresh=False),
            _stored("zz", kind=CursorType.STRING),
            "text cursors follow the source's collation",
        ),
    ],
)
def test_cursors_that_cant_be_compared_pass_and_say_why(
    result: LoadResult, stored: StoredState, reason: str
) -> None:
    check = cursor_not_backwards(table_on("postgres"), result, stored)
    assert check.passed
    assert reason in str(check.metadata["not_compared"].value)


def test_a_files_sources_text_cursor_is_not_compared_either() -> None:
    """A Spark column may carry a collation (UTF8_LCASE) that Python doesn't follow."""
    result = load_result(cursor="aa", cursor_type=CursorType.STRING, full_refresh=False)
    check = cursor_not_backwards(table_on("files"), result, _stored("zz", kind=CursorType.STRING))

    assert check.passed
    assert "collation" in str(check.metadata["not_compared"].value)


def test_a_cursor_at_or_past_the_stored_one_passes() -> None:
    result = load_result(cursor=JANUARY, full_refresh=False)
    stored = _stored("2025-01-01T00:00:00.000000+00:00")
    assert cursor_not_backwards(table_on("postgres"), result, stored).passed


def _lake_file(lake: Path, name: str, ids: list[int], key: str = "id") -> str:
    """A data file as Spark writes it: its schema kept in the footer."""
    file = f"part-h00001of00016-{name}-00000.parquet"
    spark_schema = T.StructType(
        [T.StructField(key, T.LongType()), T.StructField("v", T.StringType())]
    )
    table = pa.table({key: ids, "v": ["x"] * len(ids)}).replace_schema_metadata(
        {"org.apache.spark.sql.parquet.row.metadata": spark_schema.json()}
    )
    pq.write_table(table, lake / file)
    return file


@pytest.mark.parametrize("key", ["id", "count"])  # `count`: the name of groupBy().count()'s
def test_duplicate_keys_in_the_files_a_run_wrote_fail_the_key_check(
    spark: SparkSession, tmp_path: Path, key: str
) -> None:
    lake = tmp_path / "orders"
    lake.mkdir()
    first = _lake_file(lake, "20250101T000000aaaa0001", [1, 2, 3], key)
    second = _lake_file(lake, "20250101T000000aaaa0002", [3, 4], key)
    table = ParquetLake(str(lake))

    clean = primary_key_unique(
        lambda: spark, (key,), table, load_result(full_refresh=False, files=(first,))
    )
    both = primary_key_unique(
        lambda: spark, (key,), table, load_result(full_refresh=False, files=(first, second))
    )
    whole_lake = primary_key_unique(lambda: spark, (key,), table, load_result(full_refresh=True))

    assert clean.passed
    assert not both.passed and both.metadata["duplicate_keys"].value == 1
    assert not whole_lake.passed and whole_lake.metadata["files_checked"].value == 2
    assert both.severity == dg.AssetCheckSeverity.ERROR


def test_the_key_check_doesnt_pass_over_files_another_commit_replaced(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two runs at once without the lock: the files a run wrote are gone before the check reads
    them back. It can't say the keys are unique, so it doesn't run, saying why."""
    lake = tmp_path / "orders"
    lake.mkdir()
    kept = _lake_file(lake, "20250101T000000aaaa0001", [1, 2, 3])
    table = ParquetLake(str(lake))
    replaced = "part-h00001of00016-20250101T000000aaaa0002-00000.parquet"

    with pytest.raises(RuntimeError, match="another commit replaced 1 of the files"):
        primary_key_unique(
            lambda: spark, ("id",), table, load_result(full_refresh=False, files=(kept, replaced))
        )
