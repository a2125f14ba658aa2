"""Asset checks that run with every materialization and show on the asset's page.

* `primary_key_unique` (merge): no key appears twice. A key always hashes to the same bucket, so
  checking the bucket files this run wrote covers the whole table.
* `cursor_not_backwards`: the new cursor is not below the previous one.
* `freshness` (with `checks.freshness`): a time cursor is no older than the lag. The same lag also
  becomes the asset's Dagster freshness policy, which watches the last success between runs.
* `row_counts_match_source` (merge, with `checks.reconcile_counts`): the source's and the lake's
  row counts differ by at most that fraction.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from incremental_assets.cursor import CursorType, format_cursor, parse_cursor
from incremental_assets.results import LoadResult, StoredState
from incremental_assets.spec import Mode, TableSpec
from incremental_assets.writers.lake import LakeTable

KEY_UNIQUE = "primary_key_unique"
CURSOR_FORWARD = "cursor_not_backwards"
FRESHNESS = "freshness"
COUNTS = "row_counts_match_source"


def check_specs(table: TableSpec, key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(
            CURSOR_FORWARD, asset=key, description="The cursor never moves backwards."
        )
    ]
    if table.mode is Mode.MERGE:
        specs.append(
            dg.AssetCheckSpec(
                KEY_UNIQUE, asset=key, description="One row per primary key in the lake."
            )
        )
    if table.freshness is not None:
        specs.append(
            dg.AssetCheckSpec(
                FRESHNESS, asset=key, description=f"The cursor is at most {table.freshness} old."
            )
        )
    if table.reconcile_tolerance is not None:
        specs.append(
            dg.AssetCheckSpec(
                COUNTS,
                asset=key,
                description=f"Source and lake row counts differ by at most {table.reconcile_tolerance:.2%}.",
            )
        )
    return specs


def primary_key_unique(
    spark: SparkSession, key: tuple[str, ...], lake: LakeTable, result: LoadResult
) -> dg.AssetCheckResult:
    files = list(result.files) if not result.full_refresh else [f.name for f in lake.data_files()]
    duplicates = 0
    if files:
        keys = [F.col(f"`{c}`") for c in key]
        rows = spark.read.parquet(*[lake.spark_uri(f) for f in files]).groupBy(*keys).count()
        duplicates = rows.where(F.col("count") > 1).count()
    return dg.AssetCheckResult(
        check_name=KEY_UNIQUE,
        passed=duplicates == 0,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"duplicate_keys": duplicates, "files_checked": len(files)},
    )


def cursor_not_backwards(result: LoadResult, stored: StoredState) -> dg.AssetCheckResult:
    kind, previous = result.cursor_type, stored.cursor
    backwards = False
    if (
        kind is not None
        and kind is not CursorType.STRING
        and previous
        and result.cursor is not None
    ):
        try:
            backwards = result.cursor < parse_cursor(kind, previous)  # type: ignore[operator]
        except Exception:  # a previous cursor a full refresh replaced may not parse any more
            backwards = False
    metadata = {"previous_cursor": previous or "", "cursor": _text(kind, result.cursor)}
    # A full refresh may legitimately land lower (rows were deleted at the source): a warning.
    severity = dg.AssetCheckSeverity.WARN if result.full_refresh else dg.AssetCheckSeverity.ERROR
    return dg.AssetCheckResult(
        check_name=CURSOR_FORWARD, passed=not backwards, severity=severity, metadata=metadata
    )


def freshness(table: TableSpec, result: LoadResult, now: datetime) -> dg.AssetCheckResult:
    assert table.freshness is not None
    age = _cursor_age(result, now, table.timezone)
    passed = age is None or age <= table.freshness
    metadata: dict[str, float | str] = {"allowed_lag": str(table.freshness)}
    if age is not None:
        metadata["cursor_age_seconds"] = round(age.total_seconds(), 1)
    else:
        metadata["measured"] = "the last success (now): the cursor is not a time"
    return dg.AssetCheckResult(
        check_name=FRESHNESS, passed=passed, severity=dg.AssetCheckSeverity.WARN, metadata=metadata
    )


def row_counts_match(table: TableSpec, result: LoadResult, source_rows: int) -> dg.AssetCheckResult:
    assert table.reconcile_tolerance is not None
    lake_rows = result.row_count
    allowed = table.reconcile_tolerance * max(source_rows, lake_rows)
    return dg.AssetCheckResult(
        check_name=COUNTS,
        passed=abs(source_rows - lake_rows) <= allowed,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "source_rows": source_rows,
            "lake_rows": lake_rows,
            "allowed_difference": int(allowed),
        },
    )


def _cursor_age(result: LoadResult, now: datetime, timezone: str) -> timedelta | None:
    cursor, kind = result.cursor, result.cursor_type
    if cursor is None or kind is None or not kind.is_temporal:
        return None
    if kind is CursorType.TIMESTAMPTZ:
        return now - cursor  # type: ignore[operator]
    if kind is CursorType.DATE:
        assert isinstance(cursor, date)
        return now - datetime(cursor.year, cursor.month, cursor.day, tzinfo=UTC)
    wall_clock = now.astimezone(ZoneInfo(timezone)).replace(tzinfo=None)
    return wall_clock - cursor  # type: ignore[operator]


def _text(kind: CursorType | None, value: object) -> str:
    return "" if kind is None or value is None else format_cursor(kind, value)  # type: ignore[arg-type]
