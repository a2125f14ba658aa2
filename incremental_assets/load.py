"""One incremental load of one table: no Dagster here, so it can be driven from anything.

    previous state -> plan (window, frozen bound, new cursor) -> read -> stage -> commit -> result

The caller holds the table's lock and records the result; until it does, the stored cursor is the
old one, and a rerun reproduces this run's batch or merge idempotently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession

from incremental_assets.config import JdbcSourceSpec, LakeSpec, Mode, TableSpec
from incremental_assets.dialects import SPARK_SQL, Dialect
from incremental_assets.errors import (
    ConfigError,
    IncrementalAssetsError,
    TableProblem,
    WriteError,
)
from incremental_assets.pause_points import pause_point
from incremental_assets.plan import (
    PlanInputs,
    WindowPlan,
    boundary_of,
    collated_cursor,
    describe_bounds,
    plan_backfill,
    plan_window,
)
from incremental_assets.results import LoadResult, MergeCounts, StoredState, WriteOutcome
from incremental_assets.sources import database_of, open_source
from incremental_assets.sources.base import Source, check_columns
from incremental_assets.sources.failures import engine_error, root_messages, source_error
from incremental_assets.unchanged import files_listing, next_fingerprint, prove_unchanged
from incremental_assets.window import render_window
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import ClashingVersions, Staged, WritePlan, column_types
from incremental_assets.writers.lake import (
    KEY,
    DataFile,
    LakeTable,
    lake_error,
    new_txn,
    unfinished_commit_error,
)
from incremental_assets.writers.schema import SchemaChange, plan_schema_change

Log = Callable[[str], None]


@dataclass(frozen=True)
class LoadRequest:
    table: TableSpec
    lake: LakeSpec
    stored: StoredState
    full_refresh: bool = False
    # Re-extract [from, to) in the cursor's text form, leaving the cursor where it is.
    backfill: tuple[str, str] | None = None


@dataclass(frozen=True)
class _Run:
    """One load under way: what it reads from and writes to, and when it started."""

    request: LoadRequest
    lake: LakeTable
    dialect: Dialect
    started: float

    @property
    def table(self) -> TableSpec:
        return self.request.table


def load_without_spark(request: LoadRequest, log: Log = lambda _: None) -> LoadResult | None:
    """The run's result when it can prove, without Spark, that it would find nothing new."""
    if request.backfill:
        return None
    started = time.monotonic()
    lake = LakeTable(request.lake.table_uri(request.table.name))
    proof = prove_unchanged(request.table, request.stored, lake, request.full_refresh)
    if proof is None:
        return None
    plan = proof.plan
    report = replace(
        plan.report, window_fingerprint=proof.fingerprint, spark="not started (nothing new)"
    )
    plan = replace(plan, report=report)
    source = request.table.source
    dialect = database_of(source).dialect if isinstance(source, JdbcSourceSpec) else SPARK_SQL
    run = _Run(request, lake, dialect, started)
    files = lake.data_files()
    columns = column_types(lake.spark_schema(files[-1])) if files else ()
    log(
        f"{run.table.name}: nothing new past the cursor, and the rows it would read again are unchanged: Spark not started"
    )
    outcome = WriteOutcome(0, 0, 0, 0, None, columns)
    return _result(run, plan, outcome, batch=request.stored.batch, extracted_at=None)


def run_incremental_load(
    spark: SparkSession, request: LoadRequest, log: Log = lambda _: None
) -> LoadResult:
    lake = LakeTable(request.lake.table_uri(request.table.name))
    for note in lake.recover():
        log(f"{request.table.name}: {note}")
    request, repeat = _repeat_unrecorded_refresh(request, lake)
    listing = files_listing(request.table)
    source = open_source(spark, request.table)
    run = _Run(request, lake, source.dialect, time.monotonic())
    named_key = bool(request.table.primary_key)
    if request.table.mode is Mode.MERGE and not named_key:
        key = {"primary_key": _key_from_source(request.table, source)}
        request = replace(request, table=request.table.model_copy(update=key))
        run, source = replace(run, request=request), open_source(spark, request.table)
    check_columns(run.table, source.schema())
    recorded = _recorded_weights(request.table, lake)
    merge = request.table.mode is Mode.MERGE
    weighed_by = (source.weighed_by() or recorded) if merge else {}
    request, unmatched = _read_whole_for_weights(request, lake, source, weighed_by, recorded)
    run = replace(run, request=request)
    plan = _plan(run, source)
    fingerprint = next_fingerprint(run.table, plan, listing)
    plan = replace(plan, report=replace(plan.report, window_fingerprint=fingerprint))
    for warning in (repeat, unmatched):
        if warning:
            log(f"{run.table.name}: {warning}")
            plan = plan.warned(warning)
    if plan.window is not None and plan.bounds is not None:
        window = render_window(plan.window, run.dialect)
        log(f"{run.table.name}: window {window}; {describe_bounds(plan.bounds)}")
    change = _schema_change(run, source, plan.replace_all)
    if plan.nothing_new:
        outcome = WriteOutcome(0, 0, 0, 0, None, column_types(change.target, with_batch=True))
        return _result(run, plan, outcome, batch=request.stored.batch, extracted_at=None)
    write = _write_plan(
        run, source, plan, change, weighed_by, _key_enforced(run.table, source, named_key)
    )
    writer = writer_for(run.table.mode, spark)
    try:
        source_keys = source.read_keys() if write.reconcile else None
        delta = source.read(plan.window, plan.bounds, plan.partitioning)
        staged = writer.stage(delta, write, source_keys)
        _refuse_null_keys(run.table, staged)
        pause_point("staged")
        extracted_at = time.monotonic()
        outcome = writer.commit(staged, write)
    except Exception as exc:
        raise _failed_write(run, write.txn, exc) from None
    plan = replace(
        plan,
        report=replace(
            plan.report,
            schema_change=change.describe() or None,
            deletes_reconciled=True if write.reconcile else None,
        ),
    )
    return _result(run, plan, outcome, batch=write.batch, extracted_at=extracted_at)


def _plan(run: _Run, source: Source) -> WindowPlan:
    request = run.request
    files = run.lake.data_files()
    inputs = PlanInputs(run.table, source, request.stored, request.full_refresh, bool(files))
    if request.backfill:
        check_lake_fits(run.table, run.lake, request.stored, files)
        return plan_backfill(inputs, request.backfill)
    plan = plan_window(inputs)
    if not plan.replace_all:
        check_lake_fits(run.table, run.lake, request.stored, files)
    return plan


def _write_plan(
    run: _Run,
    source: Source,
    plan: WindowPlan,
    change: SchemaChange,
    weighed_by: dict[str, str],
    key_enforced: bool,
) -> WritePlan:
    table, lake = run.table, run.request.lake
    batch = run.request.stored.batch + 1
    return WritePlan(
        lake=run.lake,
        txn=new_txn(),
        batch=batch,
        replace_all=plan.replace_all,
        primary_key=table.primary_key,
        cursor_column=plan.cursor.column if plan.cursor else None,
        delete_column=table.delete_column,
        buckets=table.buckets,
        bucket_rows=table.bucket_rows,
        compression=lake.codec,
        max_rows_per_file=lake.max_rows_per_file,
        boundary=boundary_of(table, plan),
        schema=change,
        reconcile=plan.reconcile,
        delta_beats_lake=collated_cursor(plan, source),
        match_key=source.match_key() if table.mode is Mode.MERGE else (),
        weighed_by=tuple(weighed_by.items()),
        key_enforced=key_enforced,
    )


def _key_enforced(table: TableSpec, source: Source, named: bool) -> bool:
    """Whether the merge key is the source table's own primary key, which no two rows share."""
    if table.mode is not Mode.MERGE or table.query is not None:
        return False
    if not isinstance(table.source, JdbcSourceSpec):
        return False
    return not named or set(source.primary_key()) == set(table.primary_key)


def _key_from_source(table: TableSpec, source: Source) -> tuple[str, ...]:
    keys = source.primary_key()
    if not keys:
        raise ConfigError(
            TableProblem(
                table.name,
                f"{table.source_object} has no primary key in the database, and merge mode needs one.",
                "primary_key",
                "name the key columns: primary_key: [id].",
            )
        )
    return keys


def _repeat_unrecorded_refresh(
    request: LoadRequest, lake: LakeTable
) -> tuple[LoadRequest, str | None]:
    """Make this run a full refresh if the lake holds a replacement the stored state doesn't know.

    A run that replaced the table as batch N and died before its materialization was recorded
    leaves a stored cursor from before that snapshot, and this run would reuse batch N: an
    incremental run would then overwrite the snapshot with a delta.
    """
    snapshot = lake.snapshot_batch()
    if request.full_refresh or snapshot is None or snapshot <= request.stored.batch:
        return request, None
    if request.backfill:
        raise WriteError(
            TableProblem(
                request.table.name,
                f"a full refresh replaced the lake table {lake.uri} as batch {snapshot}, but its "
                f"run was never recorded (the last recorded batch is {request.stored.batch}), so a "
                "backfill would overwrite that snapshot. Nothing was written.",
                fix="run the table once without backfill_from and backfill_to (it repeats the "
                "full refresh), then run the backfill.",
            )
        )
    note = (
        f"a full refresh replaced the lake table as batch {snapshot} but its run was never "
        "recorded; this run repeats the full refresh"
    )
    return replace(request, full_refresh=True), note


def _refuse_null_keys(table: TableSpec, staged: Staged) -> None:
    if staged.null_keys:
        raise _key_error(
            table,
            f"{staged.null_keys} of the rows read have NULL in a key column",
            "rows whose key is NULL can't be told apart",
            "name key columns that are never NULL, filter or COALESCE them in `query:`, "
            "or load the table in append mode.",
        )


def _key_error(table: TableSpec, found: str, why: str, fix: str) -> WriteError:
    return WriteError(
        TableProblem(
            table.name,
            f"{found} ({', '.join(table.primary_key)}). A merge keeps one row per key, and {why}, "
            "so nothing was written and the cursor did not move.",
            "primary_key",
            fix,
        )
    )


def _recorded_weights(table: TableSpec, lake: LakeTable) -> dict[str, str]:
    """The collation each weight in the lake was taken under (its `_key` record)."""
    if table.mode is not Mode.MERGE:
        return {}
    return dict((lake.record(KEY) or {}).get("weighed_by", {}))


def _read_whole_for_weights(
    request: LoadRequest,
    lake: LakeTable,
    source: Source,
    weighed_by: dict[str, str],
    recorded: dict[str, str],
) -> tuple[LoadRequest, str | None]:
    """Make this run a full refresh if the lake's rows lack a weight the key is now matched on.

    A text key the database compares by collation is matched on its weight, which only the
    database computes: lake rows written without it (the key became text, or came to include a
    text column), or under another collation (the column was converted to another collation or
    character set), can't be matched, so this run reads the whole table instead.
    """
    files = lake.data_files()
    if request.table.mode is not Mode.MERGE or request.full_refresh or not files:
        return request, None
    held = set(lake.spark_schema(files[-1]).fieldNames())
    missing = [c for c in source.match_key() if c not in held]
    changed = [
        f"{name} from {recorded[name]} to {collation}"
        for name, collation in weighed_by.items()
        if recorded.get(name, collation) != collation
    ]
    if missing:
        problem = (
            f"the lake's rows don't carry {', '.join(missing)}, the weight of a text key column "
            "the database compares by its collation ('a' = 'A ')"
        )
    elif changed:
        problem = (
            f"the collation of the key's weight changed ({'; '.join(changed)}), so the lake's "
            "weights no longer match the source's"
        )
    else:
        return request, None
    if request.backfill:
        raise WriteError(
            TableProblem(
                request.table.name,
                f"{problem}, so a backfill can't match them. Nothing was written.",
                fix="run the table once without backfill_from and backfill_to (it reads the "
                "whole table), then run the backfill.",
            )
        )
    note = f"{problem}: this run reads the whole table (a full refresh)"
    return replace(request, full_refresh=True), note


def check_lake_fits(
    table: TableSpec, lake: LakeTable, stored: StoredState, files: list[DataFile]
) -> None:
    """An incremental run adds to the lake table: it must be there, and in this table's layout."""
    if stored.row_count and not files:
        raise WriteError(
            TableProblem(
                table.name,
                f"the lake table {lake.uri} has no data files, but run {stored.run_id} recorded "
                f"{stored.row_count} rows in it. An incremental run would only add the newest rows.",
                fix="run a full refresh (asset config full_refresh: true) to rebuild it.",
            )
        )
    # Append tables (and full_refresh ones) hold batches; merge tables hold buckets of the key.
    foreign = next((f for f in files if (f.bucket is None) == (table.mode is Mode.MERGE)), None)
    if foreign is not None:
        written = "merge" if foreign.bucket is not None else "append (or full_refresh)"
        raise ConfigError(
            TableProblem(
                table.name,
                f"the lake table {lake.uri} was written in {written} mode ({foreign.name}), but "
                f"the table is now mode {table.mode.value}. Loading into it incrementally would "
                "leave duplicate keys, so nothing was written and the cursor did not move.",
                "mode",
                "run a full refresh once (asset config full_refresh: true, or "
                f"`incremental-assets run {table.name} --full`) to rebuild it in "
                f"{table.mode.value} mode, or set mode back to {written}.",
            )
        )


def _schema_change(run: _Run, source: Source, replace_all: bool) -> SchemaChange:
    files = run.lake.data_files()
    if replace_all or not files:
        return plan_schema_change(run.table.name, None, source.schema())
    return plan_schema_change(run.table.name, run.lake.spark_schema(files[-1]), source.schema())


def _failed_write(run: _Run, txn: str, exc: Exception) -> IncrementalAssetsError:
    """Clean up after a failed read, stage or commit, and say what state the lake is in."""
    table, lake = run.table, run.lake
    if not lake.discard(txn):
        return unfinished_commit_error(table.name, lake.uri, txn, root_messages(exc)[-1])
    if isinstance(exc, IncrementalAssetsError):
        return exc
    if isinstance(exc, ClashingVersions):
        return _key_error(
            table,
            f"{exc.rows} of the rows read differ from another row read with the same key and "
            "cursor value",
            "which of them is the row is anyone's guess (the source doesn't enforce the key: "
            "a view, or a `query:`?)",
            "name key columns that identify one row, deduplicate in `query:`, or load the "
            "table in append mode.",
        )
    gone = engine_error(table, exc, "the load ran")
    if gone is not None:
        return gone
    messages = " ".join(root_messages(exc))
    source_marks = ("PSQLException", "FAILED_JDBC", "USER_RAISED_EXCEPTION")
    if any(mark in messages for mark in source_marks):
        return source_error(table, exc, "reading the rows")
    return lake_error(table.name, lake.uri, root_messages(exc)[-1])


def _result(
    run: _Run, plan: WindowPlan, outcome: WriteOutcome, batch: int, extracted_at: float | None
) -> LoadResult:
    table = run.table
    merge = outcome.merge
    report = plan.report
    if table.mode is Mode.MERGE:
        merge = merge or MergeCounts(0, 0, 0)
        report = replace(
            report, rows_rewritten=outcome.rows_rewritten, merge_strategy=outcome.strategy
        )
    finished = time.monotonic()
    extracted_at = finished if extracted_at is None else extracted_at
    return LoadResult(
        mode=table.mode,
        cursor_column=plan.cursor.column if plan.cursor else None,
        cursor_type=plan.cursor.type if plan.cursor else None,
        previous_cursor=plan.previous,
        cursor=plan.recorded_cursor,
        full_refresh=plan.replace_all,
        batch=batch,
        extract_filter=render_window(plan.window, run.dialect) if plan.window else "TRUE",
        rows_extracted=outcome.rows_extracted,
        rows_written=outcome.rows_written,
        files_written=outcome.files_written,
        merge=merge,
        row_count=run.lake.count_rows(),
        columns=outcome.columns,
        uri=run.lake.uri,
        extract_seconds=extracted_at - run.started,
        write_seconds=finished - extracted_at,
        warnings=plan.warnings,
        report=report,
        files=outcome.files,
        primary_key=table.primary_key,
    )
