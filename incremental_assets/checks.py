"""Asset checks that run with every materialization and show on the asset's page.

The cursor the next run reads from is no check (a check that always passes would be a value
dressed as a verdict): it is the materialization's `cursor`, or a `cursor set|reset`
observation's, whose description says so (`state.py`).

* `primary_key_unique` (merge): no key appears twice. A key always lands in the same bucket, so
  checking the bucket files a run wrote covers the whole table. With a materialization it checks
  what that run wrote, and is not run (Dagster shows it skipped, the materialization's metadata
  says why) when the run wrote no file: it never passes over files it didn't read. Executed on
  its own (the UI's "Execute", `checks.key_audit`'s schedule), it checks every file.
* `cursor_not_backwards`: the new cursor is not below the one the run started from. Incremental
  runs keep the later of the two by construction, so a failure there (ERROR) is a bug; a full
  refresh lands lower when the source lost its newest rows (WARN). String cursors are ordered
  by the database's collation, which Python can't reproduce: they are not compared.
* `freshness` (with `checks.freshness`): a time cursor is no older than the lag. The same lag also
  becomes the asset's Dagster freshness policy, which watches the last success between runs.
* `log_retained` (`capture: log`): the log the table's replication slot keeps, which the database
  can't remove until a run records a position past it, is under `checks.log_retained_mb` (WARN).
* `row_counts_match_source` (merge, with `checks.reconcile_counts`): the lake's rows and the rows
  the source says it should hold (per key the latest version by cursor, unless its delete column
  is set; from `start`; NULL cursors as `null_cursor` says) differ by at most that fraction.

A check that raises (the source is unreachable while counting, say) records a failed result
carrying the message: the lake is already committed, so the materialization must still be
recorded.

`primary_key_unique` is blocking unless `checks.key_unique_blocking` says false: when it fails,
Dagster fails the asset's step after recording the materialization and its checks, so assets
downstream of the table in the same run don't run on keys held twice.

A run that fails before it commits evaluates no check. Dagster 1.13 shows every check a failed
run planned and never evaluated as "Execution failed", whichever step failed (it resolves a
planned check by its run's status), so the project's checks sensor (`sensors.py`) runs them
alone, once, tagged `CHECKS_AFTER_FAILED_RUN`, and they record nothing: Dagster shows them
skipped, and the last real verdict stays the one of the last materialization.

That takes a run (a checks-only one, launched by the sensor named for it): Dagster resolves a
check as skipped only when a run that planned it ended without failing. A check result recorded
without a run (`instance.report_runless_asset_event(AssetCheckEvaluation(...))`) is stored as
passed or failed, from its `passed`, so it would show a check that never ran as passed or failed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import dagster as dg

from incremental_assets.config import Mode, TableSpec
from incremental_assets.cursor import CursorType, format_cursor, order_of, parse_cursor
from incremental_assets.errors import TableProblem
from incremental_assets.lake import LakeTable
from incremental_assets.results import LoadResult, StoredState
from incremental_assets.sources import open_source
from incremental_assets.sources.failures import failures_of
from incremental_assets.spark_api import F, column_named, sql
from incremental_assets.window import Window
from incremental_assets.writers.versions import soft_deleted

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEY_UNIQUE = "primary_key_unique"
CURSOR_FORWARD = "cursor_not_backwards"
FRESHNESS = "freshness"
COUNTS = "row_counts_match_source"
LOG_RETAINED = "log_retained"
ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN
# The severity of a failed check; cursor_not_backwards only warns after a full refresh.
SEVERITY = {
    KEY_UNIQUE: ERROR,
    CURSOR_FORWARD: ERROR,
    FRESHNESS: WARN,
    COUNTS: WARN,
    LOG_RETAINED: WARN,
}
# Why a check reads "Skipped" after a failed run, on the check's page (its description).
SKIPPED_WHY = (
    "Skipped after a run that failed before committing: that run left nothing new to check "
    "(a checks-only run marks it so)."
)
# Why primary_key_unique reads "Skipped" after a run that wrote nothing (`not_examined`).
NOTHING_WRITTEN_WHY = (
    "Skipped after a run that wrote no file: it examines the files a run wrote, and there were "
    "none (the materialization's checks_not_run says so)."
)
# The tag of the runs the checks sensor starts: the Runs page shows it on each in its list.
CHECKS_AFTER_FAILED_RUN = "incremental_assets/checks_only"
CHECKS_ONLY_TAGS = {CHECKS_AFTER_FAILED_RUN: "after failure"}


def check_specs(table: TableSpec, key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    described = {CURSOR_FORWARD: "The cursor never moves backwards."}
    if table.mode is Mode.MERGE:
        described[KEY_UNIQUE] = f"One row per primary key in the lake. {NOTHING_WRITTEN_WHY}"
    if table.freshness is not None:
        described[FRESHNESS] = f"The cursor is at most {table.freshness} old."
    if table.capture == "log":
        described[LOG_RETAINED] = (
            f"The table's replication slot keeps at most {table.checks.log_retained_mb} MB of "
            "the database's log."
        )
    if table.reconcile_tolerance is not None:
        described[COUNTS] = (
            f"Source and lake row counts differ by at most {table.reconcile_tolerance:.2%}."
        )
    return [
        dg.AssetCheckSpec(
            name,
            asset=key,
            description=f"{description} {SKIPPED_WHY}",
            blocking=name == KEY_UNIQUE and table.checks.key_unique_blocking,
        )
        for name, description in described.items()
    ]


def evaluate_checks(
    spark: Callable[[], SparkSession],
    table: TableSpec,
    lake: LakeTable,
    result: LoadResult,
    stored: StoredState,
    log: Callable[[str], None],
    selected: Callable[[str], bool] = lambda _: True,
) -> list[dg.AssetCheckResult]:
    """The checks `selected` names that can say something about this run, each failing on its own
    if it raises.

    `spark` gives the session when a check needs one; a run that wrote nothing starts none, and
    `primary_key_unique` is left out then (`not_examined` says why).
    """
    planned: list[tuple[str, Callable[[], dg.AssetCheckResult]]] = [
        (CURSOR_FORWARD, lambda: cursor_not_backwards(table, result, stored))
    ]
    if table.mode is Mode.MERGE and not_examined(table, result) is None:
        key = result.primary_key or table.primary_key
        planned.append((KEY_UNIQUE, lambda: primary_key_unique(spark, key, lake, result)))
    if table.freshness is not None:
        planned.append((FRESHNESS, lambda: freshness(table, result, datetime.now(UTC))))
    if table.capture == "log" and result.report.log_retained_bytes is not None:
        planned.append((LOG_RETAINED, lambda: log_retained(table, result)))
    if table.reconcile_tolerance is not None:
        planned.append(
            (
                COUNTS,
                lambda: row_counts_match(table, result, live_source_rows(spark(), table, result)),
            )
        )
    return [_guarded(table, name, check, log) for name, check in planned if selected(name)]


def not_examined(table: TableSpec, result: LoadResult) -> str | None:
    """Why `primary_key_unique` has nothing to examine in this run, if it hasn't."""
    if table.mode is not Mode.MERGE or result.full_refresh or result.written.files_written:
        return None
    return f"{KEY_UNIQUE}: this run wrote no file, so there was nothing to check"


def audit(
    spark: Callable[[], SparkSession], table: TableSpec, lake: LakeTable, selected: set[str]
) -> list[dg.AssetCheckResult]:
    """The checks executed without a materialization: `primary_key_unique` over every file.

    The others say something about a run only, and are not run without one.
    """
    if table.mode is not Mode.MERGE or KEY_UNIQUE not in selected:
        return []
    check = lambda: primary_key_unique(spark, table.primary_key, lake, None)  # noqa: E731
    return [_guarded(table, KEY_UNIQUE, check, lambda _: None)]


def _guarded(
    table: TableSpec,
    name: str,
    check: Callable[[], dg.AssetCheckResult],
    log: Callable[[str], None],
) -> dg.AssetCheckResult:
    try:
        return check()
    except Exception as exc:
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        message = TableProblem(
            table.name,
            f"the check {name} could not run: {cause.rstrip('.')}. The load itself is committed "
            "and recorded; the next run checks again.",
        ).render()
        log(message)
        return dg.AssetCheckResult(
            check_name=name,
            passed=False,
            severity=SEVERITY[name],
            description=message,
            metadata={"error": dg.MetadataValue.text(message)},
        )


def primary_key_unique(
    spark: Callable[[], SparkSession],
    key: tuple[str, ...],
    lake: LakeTable,
    result: LoadResult | None,
) -> dg.AssetCheckResult:
    """Keys held twice in the files `result` wrote (every file after a full refresh, or with no
    result)."""
    written = result.written if result is not None else None
    if written is not None and written.duplicate_keys is not None:
        # The merge counted them in the job that wrote its files.
        return _key_result(written.duplicate_keys, written.files_written, key, "as written")
    # The columns the lake's rows are matched on (`_key`): a collated text key's weight.
    matched = lake.facts().key_columns or list(key)
    files_written = None if result is None or result.full_refresh else list(result.written.files)
    duplicates, files = lake.duplicate_keys(spark(), matched, files_written)
    return _key_result(duplicates, files, key or tuple(matched), "read again")


def _key_result(duplicates: int, files: int, key: tuple[str, ...], how: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=KEY_UNIQUE,
        passed=duplicates == 0,
        severity=ERROR,
        metadata={
            "duplicate_keys": duplicates,
            "files_checked": files,
            # `as written`: counted by the merge in the job that wrote the files; `read again`:
            # the files read back after the commit.
            "checked": how,
            "primary_key": ", ".join(key),
        },
    )


def cursor_not_backwards(
    table: TableSpec, result: LoadResult, stored: StoredState
) -> dg.AssetCheckResult:
    kind, previous = result.cursor_type, stored.cursor
    metadata = {"previous_cursor": previous or "", "cursor": _text(kind, result.cursor)}
    unlike = _incomparable(table, result, stored)
    if unlike:
        metadata["not_compared"] = unlike
    backwards = (
        not unlike
        and kind is not None
        and previous is not None
        and result.cursor is not None
        and order_of(kind, table.collates_text).before(result.cursor, parse_cursor(kind, previous))
        is True
    )
    return dg.AssetCheckResult(
        check_name=CURSOR_FORWARD,
        passed=not backwards,
        # A full refresh lands lower when the source lost its newest rows: worth a look, not a bug.
        severity=WARN if result.full_refresh else ERROR,
        metadata=metadata,
    )


def _incomparable(table: TableSpec, result: LoadResult, stored: StoredState) -> str:
    """Why the new cursor can't be compared with the stored one, or '' if it can."""
    if stored.cursor is None or result.cursor is None or result.cursor_type is None:
        return ""  # nothing to compare: passes
    if stored.cursor_column and stored.cursor_column != result.cursor_column:
        return f"the previous cursor belongs to column {stored.cursor_column}"
    if stored.cursor_type is not result.cursor_type:
        return f"the previous cursor is a {stored.cursor_type or 'value of unknown type'}"
    if not order_of(result.cursor_type, table.collates_text).known:
        return "text cursors follow the source's collation, which Python can't reproduce"
    return ""


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
        check_name=FRESHNESS, passed=passed, severity=WARN, metadata=metadata
    )


def log_retained(table: TableSpec, result: LoadResult) -> dg.AssetCheckResult:
    retained = result.report.log_retained_bytes or 0
    allowed = table.checks.log_retained_mb
    return dg.AssetCheckResult(
        check_name=LOG_RETAINED,
        passed=retained <= allowed * 1024 * 1024,
        severity=WARN,
        metadata={"retained_mb": round(retained / 1024 / 1024, 1), "allowed_mb": allowed},
        description=None
        if retained <= allowed * 1024 * 1024
        else "the slot keeps the log since the position the last run recorded: run the table "
        "more often (a schedule or its sensor), or drop its capture if it is no longer loaded "
        f"(`incremental-assets cdc drop {table.name}`).",
    )


def row_counts_match(table: TableSpec, result: LoadResult, source_rows: int) -> dg.AssetCheckResult:
    assert table.reconcile_tolerance is not None
    lake_rows = result.row_count
    allowed = table.reconcile_tolerance * max(source_rows, lake_rows)
    return dg.AssetCheckResult(
        check_name=COUNTS,
        passed=abs(source_rows - lake_rows) <= allowed,
        severity=WARN,
        metadata={
            "source_rows": source_rows,
            "lake_rows": lake_rows,
            "allowed_difference": int(allowed),
        },
    )


def live_source_rows(spark: SparkSession, table: TableSpec, result: LoadResult) -> int:
    """The rows a merge lake should hold by the source: per key the latest version, not deleted."""
    keys = [column_named(c) for c in result.primary_key or table.primary_key]
    with failures_of(table, "counting the source's rows"):
        frame = _loadable_rows(spark, table, result)
        if not table.delete_column:
            return frame.select(*keys).distinct().count()
        order = (
            [column_named(result.cursor_column).desc_nulls_last()] if result.cursor_column else []
        )
        latest = frame.withColumn(
            "_version", F.row_number().over(sql.Window.partitionBy(*keys).orderBy(*order or keys))
        ).where(F.col("_version") == 1)
        return latest.where(~soft_deleted(latest, table.delete_column)).count()


def _loadable_rows(spark: SparkSession, table: TableSpec, result: LoadResult) -> DataFrame:
    """The source's rows from `start`, without NULL cursors unless `null_cursor: include`."""
    column, kind = result.cursor_column, result.cursor_type
    include_nulls = table.null_cursor == "include"
    window = None
    if table.start is not None and column is not None and kind is not None:
        window = Window(column, kind, parse_cursor(kind, table.start), include_nulls=include_nulls)
    frame = open_source(spark, table).read(window, None, None)
    if column is not None and not include_nulls:
        frame = frame.where(column_named(column).isNotNull())
    return frame


def _cursor_age(result: LoadResult, now: datetime, timezone: str) -> timedelta | None:
    cursor, kind = result.cursor, result.cursor_type
    if cursor is None or kind is None or not kind.is_temporal:
        return None
    if kind is CursorType.DATE:
        assert isinstance(cursor, date)
        return now - datetime(cursor.year, cursor.month, cursor.day, tzinfo=UTC)
    assert isinstance(cursor, datetime)
    if kind is CursorType.TIMESTAMPTZ:
        return now - cursor
    return now.astimezone(ZoneInfo(timezone)).replace(tzinfo=None) - cursor


def _text(kind: CursorType | None, value: object) -> str:
    return "" if kind is None or value is None else format_cursor(kind, value)  # type: ignore[arg-type]
