"""One incremental load of one table: no Dagster here, so it can be driven from anything.

    previous state -> window -> freeze the upper bound -> read -> stage -> commit -> result

The caller holds the table's lock and records the result; until it does, the stored cursor is the
old one, and a rerun reproduces this run's batch or merge idempotently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec, Mode, TableSpec
from incremental_assets.config.rules import (
    check_cursor_rules,
    lookback_value,
    start_value,
    time_limits,
)
from incremental_assets.cursor import (
    CursorType,
    CursorValue,
    convert_cursor,
    format_cursor,
    later_of,
    parse_cursor,
)
from incremental_assets.errors import ConfigError, CursorError, IncrementalAssetsError, WriteError
from incremental_assets.pause_points import pause_point
from incremental_assets.results import LoadResult, MergeCounts, StoredState, WriteOutcome
from incremental_assets.sources import open_source
from incremental_assets.sources.base import (
    Bounds,
    Cursor,
    FreezeRequest,
    Partitioning,
    Source,
    check_columns,
    choose_partitioning,
    resolve_cursor,
)
from incremental_assets.sources.failures import root_messages, source_error
from incremental_assets.window import (
    SPARK_SQL,
    Window,
    lower_bound,
    render_window,
    repeated_hour_start,
)
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import BATCH_COLUMN, WritePlan
from incremental_assets.writers.lake import (
    DataFile,
    LakeTable,
    lake_error,
    new_txn,
    unfinished_commit_error,
)
from incremental_assets.writers.schema import SchemaChange, plan_schema_change

Log = Callable[[str], None]
# Rows sharing the boundary value are read again by every run; past this many, say so.
BOUNDARY_WARNING_ROWS = 10_000


@dataclass(frozen=True)
class LoadRequest:
    table: TableSpec
    lake: LakeSpec
    stored: StoredState
    full_refresh: bool = False
    # Re-extract [from, to) in the cursor's text form, leaving the cursor where it is.
    backfill: tuple[str, str] | None = None


@dataclass(frozen=True)
class WindowPlan:
    """Everything decided before any row is read."""

    cursor: Cursor | None
    previous: CursorValue | None
    replace_all: bool
    window: Window | None
    bounds: Bounds | None
    partitioning: Partitioning | None
    new_cursor: CursorValue | None
    report: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    backfill: bool = False

    @property
    def nothing_new(self) -> bool:
        if self.replace_all or self.bounds is None or self.window is None:
            return False
        return self.bounds.upper is None and not (
            self.window.include_nulls and self.bounds.null_rows
        )


def run_incremental_load(
    spark: SparkSession, request: LoadRequest, log: Log = lambda _: None
) -> LoadResult:
    lake = LakeTable(request.lake.table_uri(request.table.name))
    for note in lake.recover():
        log(f"{request.table.name}: {note}")
    request, repeat = _repeat_unrecorded_refresh(request, lake)
    started = time.monotonic()
    source = open_source(spark, request.table)
    if request.table.mode is Mode.MERGE and not request.table.primary_key:
        key = _key_from_source(request.table, source)
        request = replace(request, table=request.table.model_copy(update={"primary_key": key}))
        source = open_source(spark, request.table)
    table = request.table
    schema = source.schema()
    check_columns(table, schema)
    if request.backfill:
        plan = plan_backfill(source, request, schema, lake)
    else:
        plan = plan_window(source, request, schema, lake)
    if repeat:
        log(f"{table.name}: {repeat}")
        plan = replace(plan, warnings=(*plan.warnings, repeat))
    if plan.window is not None and plan.bounds is not None:
        window = render_window(plan.window, source.dialect)
        log(f"{table.name}: window {window}; {describe_bounds(plan.bounds)}")
    change = _schema_change(spark, table, lake, schema, plan.replace_all)
    if plan.nothing_new:
        outcome = WriteOutcome(0, 0, 0, 0, None, _columns(change.target))
        return _result(
            request, plan, outcome, request.stored.batch, source, lake, started, time.monotonic()
        )
    write = WritePlan(
        lake=lake,
        txn=new_txn(),
        batch=request.stored.batch + 1,
        replace_all=plan.replace_all,
        primary_key=table.primary_key,
        cursor_column=plan.cursor.column if plan.cursor else None,
        delete_column=table.delete_column,
        buckets=table.buckets,
        bucket_rows=table.bucket_rows,
        compression=request.lake.codec,
        max_rows_per_file=request.lake.max_rows_per_file,
        boundary=_boundary(table, plan),
        schema=change,
        reconcile=_reconciles(table, plan, request.stored.batch + 1),
        delta_beats_lake=_collated_cursor(plan, source),
    )
    writer = writer_for(table.mode, spark)
    try:
        source_keys = source.read_keys() if write.reconcile else None
        delta = source.read(plan.window, plan.bounds, plan.partitioning)
        staged = writer.stage(delta, write, source_keys)
        pause_point("staged")
        extracted_at = time.monotonic()
        outcome = writer.commit(staged, write)
    except Exception as exc:
        raise _failed_write(table, lake, write.txn, exc) from None
    if change.describe():
        plan.report["schema_change"] = change.describe()
    if write.reconcile:
        plan.report["deletes_reconciled"] = True
    return _result(request, plan, outcome, write.batch, source, lake, started, extracted_at)


def plan_window(
    source: Source, request: LoadRequest, schema: T.StructType, lake: LakeTable
) -> WindowPlan:
    table, stored = request.table, request.stored
    cursor = resolve_cursor(table, schema)
    # No stored cursor: a first run, or one after `cursor reset`. Either way, everything again.
    replace_all = (
        request.full_refresh
        or table.mode is Mode.FULL_REFRESH
        or cursor is None
        or stored.cursor is None
    )
    if cursor is None:
        return WindowPlan(
            None, None, True, None, None, choose_partitioning(table, schema, None), None
        )
    if not replace_all:
        _check_lake_fits(table, lake, stored)
    previous = read_previous_cursor(table, stored, cursor, replace_all)
    check_cursor_rules(table, cursor.type)
    start = start_value(table, cursor.type)
    warnings: list[str] = []
    lower = (
        start
        if replace_all
        else lower_bound(cursor.type, previous, start, lookback_value(table, cursor.type))
    )
    if cursor.type is CursorType.TIMESTAMP and lower is not None and not replace_all:
        fold = repeated_hour_start(lower, table.timezone)  # type: ignore[arg-type]
        if fold is not None:
            warnings.append(
                f"the cursor is inside an hour that {table.timezone} repeats when daylight saving time ends; "
                f"reading again from {format_cursor(cursor.type, fold)} to catch rows written in its second pass"
            )
            lower = fold
    partitioning = choose_partitioning(table, schema, cursor)
    bounds = source.freeze(
        FreezeRequest(cursor, lower, table.timezone, partitioning, time_limits(table, cursor.type))
    )
    _check_null_cursors(table, cursor, bounds)
    include_nulls = table.null_cursor == "include"
    read_upper = bounds.newest if _whole_snapshot(table, lake, replace_all) else bounds.upper
    window = Window(
        cursor.column,
        cursor.type,
        lower,
        read_upper,
        empty=read_upper is None,
        include_nulls=include_nulls,
    )
    plan = WindowPlan(
        cursor, previous, replace_all, window, bounds, partitioning, None, {}, tuple(warnings)
    )
    return _with_new_cursor(table, plan)


def _whole_snapshot(table: TableSpec, lake: LakeTable, replace_all: bool) -> bool:
    """Whether the read takes every row, whatever the caps say (they still bound the cursor).

    A snapshot that replaces what the lake holds (every run of a full_refresh table; a full
    refresh or a `cursor reset` of a loaded table) must hold the whole table: a row the caps held
    back would be gone from the lake until the next run, or for good if it keeps changing. A first
    load into an empty lake may leave such rows for the next run, as an incremental run does.
    """
    return replace_all and (table.mode is Mode.FULL_REFRESH or bool(lake.data_files()))


def plan_backfill(
    source: Source, request: LoadRequest, schema: T.StructType, lake: LakeTable
) -> WindowPlan:
    """Re-read `[from, to)` into the lake; the cursor is carried forward unchanged."""
    table = request.table
    assert request.backfill is not None
    cursor = resolve_cursor(table, schema)
    values = check_backfill_window(
        table,
        None if cursor is None else cursor.type,
        request.backfill,
        ("backfill_from", "backfill_to"),
    )
    assert cursor is not None and values is not None  # no cursor: refused; its type is known
    _check_lake_fits(table, lake, request.stored)
    low, high = values
    previous = read_previous_cursor(table, request.stored, cursor, full_refresh=False)
    partitioning = choose_partitioning(table, schema, cursor)
    bounds = source.freeze(FreezeRequest(cursor, low, table.timezone, partitioning, below=high))
    window = Window(
        cursor.column, cursor.type, low, high, upper_exclusive=True, empty=bounds.upper is None
    )
    report = {"backfill": f"[{request.backfill[0]}, {request.backfill[1]})"}
    return WindowPlan(
        cursor, previous, False, window, bounds, partitioning, previous, report, backfill=True
    )


def describe_bounds(bounds: Bounds) -> str:
    parts = [f"{bounds.rows} rows up to the frozen bound"]
    if bounds.boundary_rows:
        parts.append(f"{bounds.boundary_rows} on the bound itself")
    if bounds.transaction and bounds.transaction.rows_held_back:
        parts.append(f"{bounds.transaction.rows_held_back} held back by an open transaction")
    if bounds.null_rows:
        parts.append(f"{bounds.null_rows} with a NULL cursor")
    return ", ".join(parts)


def _key_from_source(table: TableSpec, source: Source) -> tuple[str, ...]:
    keys = source.primary_key()
    if not keys:
        raise ConfigError(
            f"Table '{table.name}', field 'primary_key': {table.source_object} has no primary key in "
            "the database, and merge mode needs one. Name the key columns: primary_key: [id]."
        )
    return keys


def _with_new_cursor(table: TableSpec, plan: WindowPlan) -> WindowPlan:
    """The frozen bound becomes the cursor, capped at the clock plus the future tolerance."""
    assert plan.cursor is not None and plan.bounds is not None
    kind, bounds = plan.cursor.type, plan.bounds
    upper = bounds.upper
    report: dict[str, Any] = {
        "null_cursor_rows": bounds.null_rows,
        "boundary_rows": bounds.boundary_rows,
    }
    warnings = list(plan.warnings)
    if bounds.future_cap is not None and upper is not None and upper > bounds.future_cap:  # type: ignore[operator]
        report["cursor_capped_at"] = format_cursor(kind, bounds.future_cap)
        warnings.append(
            f"rows are dated after the clock plus future_tolerance ({format_cursor(kind, bounds.future_cap)}); "
            "they were loaded, but the cursor stops at that time so rows written later are not hidden"
        )
        upper = bounds.future_cap
    if bounds.boundary_rows > BOUNDARY_WARNING_ROWS:
        warnings.append(
            f"{bounds.boundary_rows} rows share the cursor value {format_cursor(kind, bounds.upper)}; every run "  # type: ignore[arg-type]
            "reads them again. A finer-grained cursor column would avoid that."
        )
    if bounds.null_rows and table.null_cursor == "exclude":
        warnings.append(
            f"{bounds.null_rows} rows with a NULL {plan.cursor.column} were left out (null_cursor: exclude)"
        )
    report.update(_transaction_report(bounds, warnings))
    new_cursor = upper if plan.replace_all else later_of(kind, plan.previous, upper)
    return replace(plan, new_cursor=new_cursor, report=report, warnings=tuple(warnings))


def _transaction_report(bounds: Bounds, warnings: list[str]) -> dict[str, Any]:
    cap = bounds.transaction
    if cap is None:
        return {}
    text = "no other transaction open"
    if cap.oldest_start is not None:
        text = f"{format_cursor(CursorType.TIMESTAMPTZ, cap.oldest_start)}: {cap.holder}"
    if cap.hidden_sessions:
        text = f"partial ({cap.hidden_sessions} sessions of other roles are hidden); {text}"
        warnings.append(
            f"the transaction cap could not see {cap.hidden_sessions} sessions of other roles in "
            "pg_stat_activity, so rows their transactions commit late may be missed. Fix: GRANT "
            "pg_read_all_stats to the source's user, or set a lookback."
        )
    if cap.limits:
        text = f"{text}; " + "; ".join(cap.limits)
        warnings.extend(f"transaction cap: {limit}" for limit in cap.limits)
    return {"transaction_cap": text, "transaction_cap_applied": cap.rows_held_back > 0}


def read_previous_cursor(
    table: TableSpec, stored: StoredState, cursor: Cursor, full_refresh: bool
) -> CursorValue | None:
    """The stored cursor as a value of the column's type; a full refresh ignores a bad one."""
    if stored.cursor is None:
        return None
    if stored.cursor_column and stored.cursor_column != cursor.column and not full_refresh:
        raise ConfigError(
            f"Table '{table.name}', field 'cursor': the stored cursor belongs to column "
            f"'{stored.cursor_column}', but the table now uses '{cursor.column}'. Run a full refresh "
            "(asset config full_refresh: true) to load from the new column."
        )
    stored_type = stored.cursor_type or cursor.type
    try:
        value = parse_cursor(stored_type, stored.cursor)
        # A column whose type changed keeps its cursor's meaning (timestamp -> timestamptz, ...).
        return convert_cursor(value, stored_type, cursor.type, table.timezone)
    except CursorError as exc:
        if full_refresh:
            return None
        if stored_type is not cursor.type:
            raise CursorError(
                f"Table '{table.name}', field 'cursor': the column '{cursor.column}' was "
                f"{stored_type.value} when run {stored.run_id} recorded the cursor {stored.cursor!r}, "
                f"and is {cursor.type.value} now: {exc} Fix: run a full refresh (asset config "
                "full_refresh: true); the lake and the cursor are left as they are until it succeeds."
            ) from None
        raise CursorError(
            f"Table '{table.name}': the stored cursor {stored.cursor!r} (metadata key `cursor` of run "
            f"{stored.run_id}) can't be read as the {cursor.type.value} column '{cursor.column}': "
            f"{exc} Fix: run a full refresh (asset config full_refresh: true); the lake and the "
            "cursor are left as they are until it succeeds."
        ) from None


def check_backfill_window(
    table: TableSpec,
    known_type: CursorType | None,
    window: tuple[str, str],
    names: tuple[str, str],
) -> tuple[CursorValue, CursorValue] | None:
    """Refuse a backfill that can't run: no cursor, a full_refresh table, bad values, an empty window.

    Called before Spark starts (by the asset and the CLI) with the type a run recorded, and by the
    load with the type the source reports. The values are checked, and returned, once the type is
    known (given, or declared in the config).
    """
    if table.cursor is None:
        raise ConfigError(
            f"Table '{table.name}' has no cursor, so there is no window to backfill; run a full "
            "refresh instead."
        )
    if table.mode is Mode.FULL_REFRESH:
        raise ConfigError(
            f"Table '{table.name}', field 'mode': a full_refresh table is replaced by a new snapshot "
            "on every run, so a backfill has nothing to add. Run the table without backfill_from "
            "and backfill_to."
        )
    kind = known_type or table.cursor.declared_type
    if kind is None:
        return None
    low, high = (
        _backfill_value(table, kind, text, name) for text, name in zip(window, names, strict=True)
    )
    # Strings are ordered by the database's collation: only an equal pair is surely empty.
    empty = low == high if kind is CursorType.STRING else low >= high  # type: ignore[operator]
    if empty:
        raise ConfigError(
            f"Table '{table.name}': the backfill window [{window[0]}, {window[1]}) is empty; "
            f"{names[0]} is where it starts (inclusive) and must be below {names[1]}, where it "
            "ends (exclusive). Fix the order of the two values."
        )
    return low, high


def _backfill_value(table: TableSpec, kind: CursorType, text: str, name: str) -> CursorValue:
    try:
        return parse_cursor(kind, text)
    except CursorError as exc:
        column = table.cursor.column if table.cursor else ""
        raise ConfigError(
            f"Table '{table.name}', {name}: {exc} The cursor column '{column}' is a {kind.value}."
        ) from None


def _check_null_cursors(table: TableSpec, cursor: Cursor, bounds: Bounds) -> None:
    if bounds.null_rows and table.null_cursor == "error":
        raise CursorError(
            f"Table '{table.name}': {bounds.null_rows} rows have a NULL cursor ({cursor.column}), so no "
            "window would ever read them. Nothing was written. Fix: set null_cursor: include (read "
            "them on every run) or null_cursor: exclude (leave them out), or fill the column."
        )


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
    table = request.table
    if request.backfill:
        raise WriteError(
            f"Table '{table.name}': a full refresh replaced the lake table {lake.uri} as batch "
            f"{snapshot}, but its run was never recorded (the last recorded batch is "
            f"{request.stored.batch}), so a backfill would overwrite that snapshot. Nothing was "
            "written. Run the table once without backfill_from and backfill_to (it repeats the "
            "full refresh), then run the backfill."
        )
    note = (
        f"a full refresh replaced the lake table as batch {snapshot} but its run was never "
        "recorded; this run repeats the full refresh"
    )
    return replace(request, full_refresh=True), note


def _check_lake_fits(table: TableSpec, lake: LakeTable, stored: StoredState) -> None:
    """An incremental run adds to the lake table: it must be there, and in this table's layout."""
    files = lake.data_files()
    if stored.row_count and not files:
        raise WriteError(
            f"Table '{table.name}': the lake table {lake.uri} has no data files, but run "
            f"{stored.run_id} recorded {stored.row_count} rows in it. An incremental run would "
            "only add the newest rows. Run a full refresh (asset config full_refresh: true) to "
            "rebuild it."
        )
    # Append tables (and full_refresh ones) hold batches; merge tables hold buckets of the key.
    foreign = [f for f in files if (f.bucket is None) == (table.mode is Mode.MERGE)]
    if foreign:
        raise ConfigError(_mode_change_message(table, lake, foreign[0]))


def _mode_change_message(table: TableSpec, lake: LakeTable, foreign: DataFile) -> str:
    written = "merge" if foreign.bucket is not None else "append (or full_refresh)"
    return (
        f"Table '{table.name}', field 'mode': the lake table {lake.uri} was written in {written} "
        f"mode ({foreign.name}), but the table is now mode {table.mode.value}. Loading into it "
        "incrementally would leave duplicate keys, so nothing was written and the cursor did not "
        "move. Fix: run a full refresh once (asset config full_refresh: true, or "
        f"`incremental-assets run {table.name} --full`) to rebuild it in {table.mode.value} mode, or "
        f"set mode back to {written}."
    )


def _schema_change(
    spark: SparkSession, table: TableSpec, lake: LakeTable, source: T.StructType, replace_all: bool
) -> SchemaChange:
    files = lake.data_files()
    if replace_all or not files:
        return plan_schema_change(table.name, None, source)
    return plan_schema_change(table.name, lake.spark_schema(files[-1]), source)


def _boundary(table: TableSpec, plan: WindowPlan) -> Window | None:
    """The part of the read the lake may already hold, for the writer to check against it.

    Append needs every such row (from the lower bound up: ties, lookback, capped cursors) to keep
    each version once. Merge is idempotent whatever it is told and only skips rewriting what
    repeats the lake, so the rows at or below the previous cursor are enough.
    """
    if table.mode is Mode.FULL_REFRESH or plan.replace_all or plan.window is None:
        return None
    if plan.backfill:
        return plan.window
    if plan.previous is None:
        return None
    window = plan.window
    if table.mode is Mode.MERGE:
        return Window(
            window.column,
            window.cursor_type,
            upper=plan.previous,
            include_nulls=window.include_nulls,
        )
    return Window(
        window.column, window.cursor_type, window.lower, include_nulls=window.include_nulls
    )


def _reconciles(table: TableSpec, plan: WindowPlan, batch: int) -> bool:
    if table.deletes != "reconcile" or plan.replace_all or plan.backfill:
        return False
    return batch % table.reconcile_every == 0


def _collated_cursor(plan: WindowPlan, source: Source) -> bool:
    """A text cursor the database ordered by its collation, which Spark can't reproduce."""
    return (
        plan.cursor is not None
        and plan.cursor.type is CursorType.STRING
        and source.dialect is not SPARK_SQL
    )


def _columns(schema: T.StructType) -> tuple[tuple[str, str], ...]:
    return (*((f.name, f.dataType.simpleString()) for f in schema.fields), (BATCH_COLUMN, "bigint"))


def _failed_write(
    table: TableSpec, lake: LakeTable, txn: str, exc: Exception
) -> IncrementalAssetsError:
    """Clean up after a failed read, stage or commit, and say what state the lake is in."""
    if not lake.discard(txn):
        return unfinished_commit_error(table.name, lake.uri, txn, root_messages(exc)[-1])
    if isinstance(exc, IncrementalAssetsError):
        return exc
    return _failure(table, lake, exc)


def _failure(table: TableSpec, lake: LakeTable, exc: Exception) -> IncrementalAssetsError:
    messages = " ".join(root_messages(exc))
    source_marks = ("PSQLException", "FAILED_JDBC", "USER_RAISED_EXCEPTION")
    if any(mark in messages for mark in source_marks):
        return source_error(table, exc, "reading the rows")
    return lake_error(table.name, lake.uri, root_messages(exc)[-1])


def _result(
    request: LoadRequest,
    plan: WindowPlan,
    outcome: WriteOutcome,
    batch: int,
    source: Source,
    lake: LakeTable,
    started: float,
    extracted_at: float,
) -> LoadResult:
    table = request.table
    merge = outcome.merge
    if merge is None and table.mode is Mode.MERGE:
        merge = MergeCounts(0, 0, 0)
    report = dict(plan.report)
    if table.mode is Mode.MERGE:
        report["rows_rewritten"] = outcome.rows_rewritten
    new_cursor = plan.previous if plan.nothing_new else plan.new_cursor
    return LoadResult(
        mode=table.mode,
        cursor_column=plan.cursor.column if plan.cursor else None,
        cursor_type=plan.cursor.type if plan.cursor else None,
        previous_cursor=plan.previous,
        cursor=new_cursor,
        full_refresh=plan.replace_all,
        batch=batch,
        extract_filter=render_window(plan.window, source.dialect) if plan.window else "TRUE",
        rows_extracted=outcome.rows_extracted,
        rows_written=outcome.rows_written,
        files_written=outcome.files_written,
        merge=merge,
        row_count=lake.count_rows(),
        columns=outcome.columns,
        uri=lake.uri,
        extract_seconds=extracted_at - started,
        write_seconds=time.monotonic() - extracted_at,
        warnings=plan.warnings,
        report=report,
        files=outcome.files,
        primary_key=table.primary_key,
    )
