"""A bounded backfill: `[from, to)` of the cursor read again into the lake, the cursor left where
it is. The window is checked before Spark starts (by the asset and the CLI, with the type a run
recorded) and again by the load with the type the source reports."""

from __future__ import annotations

from incremental_assets.config import Mode, TableSpec
from incremental_assets.cursor import CursorType, CursorValue, order_of, parse_cursor
from incremental_assets.errors import ConfigError, CursorError, TableProblem
from incremental_assets.plan import PlanInputs, WindowPlan, read_previous_cursor
from incremental_assets.results import Report
from incremental_assets.sources.base import FreezeRequest, choose_partitioning, resolve_cursor
from incremental_assets.window import Window

BACKFILL_FIELDS = ("backfill_from", "backfill_to")


def plan_backfill(inputs: PlanInputs, backfill: tuple[str, str]) -> WindowPlan:
    """Re-read `[from, to)` into the lake; the cursor is carried forward unchanged."""
    table, schema = inputs.table, inputs.source.schema()
    cursor = resolve_cursor(table, schema)
    values = check_backfill_window(
        table, None if cursor is None else cursor.type, backfill, BACKFILL_FIELDS
    )
    assert cursor is not None and values is not None  # no cursor: refused; its type is known
    low, high = values
    previous = read_previous_cursor(table, inputs.stored, cursor, full_refresh=False)
    partitioning = choose_partitioning(table, schema, cursor)
    bounds = inputs.source.freeze(
        FreezeRequest(
            cursor=cursor, lower=low, timezone=table.timezone, partitioning=partitioning, below=high
        )
    )
    window = Window(
        cursor.column, cursor.type, low, high, upper_edge="open", empty=bounds.upper is None
    )
    return WindowPlan(
        cursor=cursor,
        replace_all=False,
        partitioning=partitioning,
        previous=previous,
        window=window,
        bounds=bounds,
        new_cursor=previous,
        report=Report(backfill=f"[{backfill[0]}, {backfill[1]})"),
        backfill=True,
    )


def check_backfill_window(
    table: TableSpec,
    known_type: CursorType | None,
    window: tuple[str, str],
    names: tuple[str, str],
) -> tuple[CursorValue, CursorValue] | None:
    """Refuse a backfill that can't run: no cursor, a full_refresh table, bad values, an empty
    window.

    Called before Spark starts (by the asset and the CLI) with the type a run recorded, and by the
    load with the type the source reports. The values are checked, and returned, once the type is
    known (given, or declared in the config).
    """
    if table.cursor is None:
        raise ConfigError(
            TableProblem(
                table.name,
                "the table has no cursor, so there is no window to backfill; run a full refresh "
                "instead.",
            )
        )
    if table.mode is Mode.FULL_REFRESH:
        raise ConfigError(
            TableProblem(
                table.name,
                "a full_refresh table is replaced by a new snapshot on every run, so a backfill "
                "has nothing to add.",
                "mode",
                "run the table without backfill_from and backfill_to.",
            )
        )
    kind = known_type or table.cursor.declared_type
    if kind is None:
        return None
    low, high = (
        _backfill_value(table, kind, text, name) for text, name in zip(window, names, strict=True)
    )
    # Unequal text may be in either order (a collation orders it): only an equal pair is surely
    # empty.
    if order_of(kind, table.collates_text).before(low, high) is False:
        raise ConfigError(
            TableProblem(
                table.name,
                f"the backfill window [{window[0]}, {window[1]}) is empty; {names[0]} is where it "
                f"starts (inclusive) and must be below {names[1]}, where it ends (exclusive).",
                fix="swap the two values.",
            )
        )
    return low, high


def _backfill_value(table: TableSpec, kind: CursorType, text: str, name: str) -> CursorValue:
    try:
        return parse_cursor(kind, text)
    except CursorError as exc:
        column = table.cursor.column if table.cursor else ""
        raise ConfigError(
            TableProblem(
                table.name, f"{exc} The cursor column '{column}' is of type {kind.value}.", name
            )
        ) from None
