"""What a load decides before it reads a row: the window, the frozen bound and the new cursor.

    stored state + table + source schema -> cursor -> previous cursor -> lower bound -> freeze
    -> window to read -> cursor to record

No Spark job runs here beyond the source's bounds query, and no Dagster: the decisions are plain
values, tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from incremental_assets.config import Mode, TableSpec
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
    order_of,
    parse_cursor,
)
from incremental_assets.decisions import RunKind
from incremental_assets.errors import ConfigError, CursorError, TableProblem
from incremental_assets.results import Report, StoredState
from incremental_assets.sources.base import (
    Bounds,
    Cursor,
    FreezeRequest,
    Partitioning,
    Source,
    choose_partitioning,
    resolve_cursor,
)
from incremental_assets.window import Window, lower_bound, repeated_hour_start

# Rows sharing the boundary value are read again by every run; past this many, say so.
BOUNDARY_WARNING_ROWS = 10_000


@dataclass(frozen=True)
class WindowPlan:
    """Everything decided before any row is read."""

    cursor: Cursor | None
    replace_all: bool
    partitioning: Partitioning | None = None
    previous: CursorValue | None = None
    window: Window | None = None
    bounds: Bounds | None = None
    new_cursor: CursorValue | None = None
    report: Report = field(default_factory=Report)
    warnings: tuple[str, ...] = ()
    backfill: bool = False
    # A snapshot that replaces what the lake holds: the read takes every row up to the newest.
    read_to_newest: bool = False
    # `deletes: reconcile` is due: the source's keys are compared with the lake's.
    reconcile: bool = False

    @property
    def nothing_new(self) -> bool:
        """No row to read and no key to reconcile: the run writes nothing."""
        if self.replace_all or self.reconcile or self.bounds is None or self.window is None:
            return False
        return self.bounds.upper is None and not (
            self.window.include_nulls and self.bounds.null_rows
        )

    @property
    def recorded_cursor(self) -> CursorValue | None:
        """The cursor the run records: unchanged when it found nothing new."""
        return self.previous if self.nothing_new else self.new_cursor

    def warned(self, *warnings: str) -> WindowPlan:
        return replace(self, warnings=(*self.warnings, *warnings))


@dataclass(frozen=True)
class PlanInputs:
    """What a plan starts from: the table, its source, the stored state, the kind of run."""

    table: TableSpec
    source: Source
    stored: StoredState
    kind: RunKind


@dataclass(frozen=True, kw_only=True)
class Start:
    """Where a read starts, decided before the source is asked anything: the previous cursor,
    the lower bound (lookback applied) and what to freeze."""

    cursor: Cursor
    previous: CursorValue | None
    lower: CursorValue | None
    replace_all: bool
    partitioning: Partitioning | None = None
    warnings: tuple[str, ...] = ()

    def freeze_request(self, table: TableSpec) -> FreezeRequest:
        return FreezeRequest(
            cursor=self.cursor,
            lower=self.lower,
            timezone=table.timezone,
            partitioning=self.partitioning,
            limits=time_limits(table, self.cursor.type),
        )


def start_of(
    table: TableSpec,
    cursor: Cursor,
    previous: CursorValue | None,
    replace_all: bool,
    partitioning: Partitioning | None = None,
) -> Start:
    lower, warnings = lower_bound_of(table, cursor, previous, replace_all)
    return Start(
        cursor=cursor,
        previous=previous,
        lower=lower,
        replace_all=replace_all,
        partitioning=partitioning,
        warnings=warnings,
    )


def plan_window(inputs: PlanInputs) -> WindowPlan:
    """The window of a run the kind of run says (`decisions.kind_of_run`): the source's bounds
    frozen, the cursor to record planned."""
    table, stored, kind = inputs.table, inputs.stored, inputs.kind
    cursor = resolve_cursor(table, inputs.source.schema())
    partitioning = choose_partitioning(table, inputs.source.schema(), cursor)
    if cursor is None:
        return WindowPlan(cursor=None, replace_all=True, partitioning=partitioning)
    check_cursor_rules(table, cursor.type)
    previous = read_previous_cursor(table, stored, cursor, kind.replace_all)
    start = start_of(table, cursor, previous, kind.replace_all, partitioning)
    bounds = inputs.source.freeze(start.freeze_request(table))
    return plan_from_bounds(table, stored, start, bounds, read_to_newest=kind.read_to_newest)


def plan_from_bounds(
    table: TableSpec,
    stored: StoredState,
    start: Start,
    bounds: Bounds,
    *,
    read_to_newest: bool = False,
) -> WindowPlan:
    """The window to read and the cursor to record, once the source has frozen its bounds: by a
    run with Spark, and by the check without it, alike."""
    check_null_cursors(table, start.cursor, bounds)
    read_upper = bounds.newest if read_to_newest else bounds.upper
    window = Window(
        start.cursor.column,
        start.cursor.type,
        start.lower,
        read_upper,
        empty=read_upper is None,
        include_nulls=table.null_cursor == "include",
    )
    plan = WindowPlan(
        cursor=start.cursor,
        replace_all=start.replace_all,
        partitioning=start.partitioning,
        previous=start.previous,
        window=window,
        bounds=bounds,
        warnings=start.warnings,
        read_to_newest=read_to_newest,
    )
    plan = replace(plan, reconcile=reconciles(table, plan, stored.batch + 1))
    return with_new_cursor(table, plan)


def lower_bound_of(
    table: TableSpec, cursor: Cursor, previous: CursorValue | None, replace_all: bool
) -> tuple[CursorValue | None, tuple[str, ...]]:
    """Where the read starts: `start` for a snapshot, else the previous cursor minus the lookback.

    A `timestamp` cursor inside an hour its zone repeats starts again at the start of that hour.
    """
    start = start_value(table, cursor.type)
    if replace_all:
        return start, ()
    lower = lower_bound(cursor.type, previous, start, lookback_value(table, cursor.type))
    if cursor.type is not CursorType.TIMESTAMP or lower is None:
        return lower, ()
    fold = repeated_hour_start(lower, table.timezone)  # type: ignore[arg-type]
    if fold is None:
        return lower, ()
    warning = (
        f"the cursor is inside an hour that {table.timezone} repeats when daylight saving time "
        f"ends; reading again from {format_cursor(cursor.type, fold)} to catch rows written in "
        "its second pass"
    )
    return fold, (warning,)


def describe_bounds(bounds: Bounds) -> str:
    parts = [f"{bounds.rows} rows up to the frozen bound"]
    if bounds.boundary_rows:
        parts.append(f"{bounds.boundary_rows} on the bound itself")
    if bounds.transaction and bounds.transaction.rows_held_back:
        parts.append(f"{bounds.transaction.rows_held_back} held back by an open transaction")
    if bounds.null_rows:
        parts.append(f"{bounds.null_rows} with a NULL cursor")
    return ", ".join(parts)


def with_new_cursor(table: TableSpec, plan: WindowPlan) -> WindowPlan:
    """The frozen bound becomes the cursor, capped at the clock plus the future tolerance."""
    assert plan.cursor is not None and plan.bounds is not None
    kind, bounds = plan.cursor.type, plan.bounds
    upper = bounds.upper
    capped_at = None
    warnings = list(plan.warnings)
    order = order_of(kind, table.collates_text)
    if (
        bounds.future_cap is not None
        and upper is not None
        and order.before(bounds.future_cap, upper)
    ):
        capped_at = format_cursor(kind, bounds.future_cap)
        warnings.append(
            f"rows are dated after the clock plus future_tolerance ({capped_at}); they were "
            "loaded, but the cursor stops at that time so rows written later are not hidden"
        )
        upper = bounds.future_cap
    if bounds.boundary_rows > BOUNDARY_WARNING_ROWS:
        warnings.append(
            f"{bounds.boundary_rows} rows share the cursor value "
            f"{format_cursor(kind, bounds.upper)}; every run "  # type: ignore[arg-type]
            "reads them again. A finer-grained cursor column would avoid that."
        )
    if bounds.null_rows and table.null_cursor == "exclude":
        warnings.append(
            f"{bounds.null_rows} rows with a NULL {plan.cursor.column} were left out "
            "(null_cursor: exclude)"
        )
    cap, held = _transaction_report(bounds, warnings)
    report = Report(
        null_cursor_rows=bounds.null_rows,
        boundary_rows=bounds.boundary_rows,
        cursor_capped_at=capped_at,
        transaction_cap=cap,
        transaction_cap_applied=held,
    )
    new_cursor = upper if plan.replace_all else order.later(plan.previous, upper)
    return replace(plan, new_cursor=new_cursor, report=report, warnings=tuple(warnings))


def _transaction_report(bounds: Bounds, warnings: list[str]) -> tuple[str | None, bool | None]:
    """What the transaction cap saw and could not see, and whether it held rows back."""
    cap = bounds.transaction
    if cap is None:
        return None, None
    # Where the cap is partly blind, "none open" would claim more than it knows.
    text = "no other transaction seen" if cap.limits else "no other transaction open"
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
    return text, cap.rows_held_back > 0


_FULL_REFRESH_FIX = (
    "run a full refresh (asset config full_refresh: true); the lake and the cursor are left as "
    "they are until it succeeds."
)


def read_previous_cursor(
    table: TableSpec, stored: StoredState, cursor: Cursor, full_refresh: bool
) -> CursorValue | None:
    """The stored cursor as a value of the column's type; a full refresh ignores a bad one."""
    if stored.cursor is None:
        return None
    if stored.cursor_column and stored.cursor_column != cursor.column and not full_refresh:
        raise ConfigError(
            TableProblem(
                table.name,
                f"the stored cursor belongs to column '{stored.cursor_column}', but the table now "
                f"uses '{cursor.column}'.",
                "cursor",
                "run a full refresh (asset config full_refresh: true) to load from the new column.",
            )
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
            message = (
                f"the column '{cursor.column}' was {stored_type.value} when run {stored.run_id} "
                f"recorded the cursor {stored.cursor!r}, and is {cursor.type.value} now: {exc}"
            )
            raise CursorError(
                TableProblem(table.name, message, "cursor", _FULL_REFRESH_FIX)
            ) from None
        message = (
            f"the stored cursor {stored.cursor!r} (metadata key `cursor` of run {stored.run_id}) "
            f"can't be read as the {cursor.type.value} column '{cursor.column}': {exc}"
        )
        raise CursorError(TableProblem(table.name, message, fix=_FULL_REFRESH_FIX)) from None


def check_null_cursors(table: TableSpec, cursor: Cursor, bounds: Bounds) -> None:
    if bounds.null_rows and table.null_cursor == "error":
        raise CursorError(
            TableProblem(
                table.name,
                f"{bounds.null_rows} rows have a NULL cursor ({cursor.column}), so no window would "
                "ever read them. Nothing was written.",
                fix="set null_cursor: include (read them on every run) or null_cursor: exclude "
                "(leave them out), or fill the column.",
            )
        )


def boundary_of(table: TableSpec, plan: WindowPlan) -> Window | None:
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


def reconciles(table: TableSpec, plan: WindowPlan, batch: int) -> bool:
    """Whether this run also removes keys the source no longer has (`deletes: reconcile`)."""
    if table.deletes != "reconcile" or plan.replace_all or plan.backfill:
        return False
    return batch % table.reconcile_every == 0


def collated_cursor(table: TableSpec, plan: WindowPlan) -> bool:
    """A text cursor the database ordered by its collation, which Spark can't reproduce."""
    return (
        plan.cursor is not None and not order_of(plan.cursor.type, table.collates_text).spark_orders
    )
