"""The extraction window and its SQL. Pure Python: no Spark, no Dagster.

Boundary semantics (the README states the same):

* the lower bound is **inclusive**: `cursor >= previous cursor` (minus `lookback`). Rows that tie
  with the last cursor value are read again, so a row that commits later with the same value is
  not lost. Merge mode absorbs the re-read rows by key; append mode drops rows already in the lake
  by (primary key, cursor) or by whole-row identity.
* the upper bound is **inclusive** and frozen before the read: `cursor <= max(cursor)` as measured
  by one query, capped at `now - safety_lag` (and, for a database, below the oldest open
  transaction).
  Rows that arrive later above it wait for the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    Context,
    Decimal,
    Inexact,
    Rounded,
    localcontext,
)
from typing import Literal

from incremental_assets.cursor import CursorType, CursorValue
from incremental_assets.dialects import Dialect

Lookback = int | Decimal | timedelta
# Whether a bound's own value is in the window: `closed` (<=, >=) or `open` (<).
Edge = Literal["closed", "open"]


@dataclass(frozen=True)
class Window:
    """`lower <= column <= upper`, each bound optional."""

    column: str
    cursor_type: CursorType
    lower: CursorValue | None = None
    upper: CursorValue | None = None
    # Nothing was below the cap when the bound was frozen: a full refresh then reads no rows.
    empty: bool = False
    # `null_cursor: include`: rows whose cursor is NULL belong to every window.
    include_nulls: bool = False
    # Bounded backfills read [from, to): their upper bound is open.
    upper_edge: Edge = "closed"


def lower_bound(
    cursor_type: CursorType,
    previous: CursorValue | None,
    start: CursorValue | None,
    lookback: Lookback | None,
) -> CursorValue | None:
    """Where the next read starts: the previous cursor minus the lookback, else `start`.

    A lookback reaching below year 1 means no lower bound: reading more is safe, less is not.
    """
    if previous is None:
        return start
    if lookback is None:
        return previous
    try:
        return subtract_lookback(cursor_type, previous, lookback)
    except OverflowError:
        return None


def subtract_lookback(
    cursor_type: CursorType, value: CursorValue, lookback: Lookback
) -> CursorValue:
    """`value - lookback`, exactly."""
    if cursor_type is CursorType.DATE:
        assert isinstance(value, date) and isinstance(lookback, timedelta)
        whole_days = -(-lookback // timedelta(days=1))
        return value - timedelta(days=whole_days)
    if cursor_type.is_timestamp:
        assert isinstance(value, datetime) and isinstance(lookback, timedelta)
        return value - lookback
    if cursor_type is CursorType.INTEGER:
        assert isinstance(value, int) and isinstance(lookback, int)
        return value - lookback
    if cursor_type is CursorType.DECIMAL:
        assert isinstance(value, Decimal) and isinstance(lookback, int | Decimal)
        with localcontext(_EXACT):
            return value - lookback
    raise ValueError(f"lookback does not apply to {cursor_type.value} cursors")


# Unbounded precision, and a trap should anything still round: a rounded bound skips rows.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Rounded])


def render_window(window: Window, dialect: Dialect) -> str:
    """The predicate every partition of the read uses; `TRUE` when the window is unbounded."""
    column = dialect.quote(window.column)
    parts = []
    if window.lower is not None:
        parts.append(f"{column} >= {dialect.literal(window.cursor_type, window.lower)}")
    if window.upper is not None:
        operator = "<" if window.upper_edge == "open" else "<="
        parts.append(f"{column} {operator} {dialect.literal(window.cursor_type, window.upper)}")
    predicate = "FALSE" if window.empty else " AND ".join(parts) if parts else "TRUE"
    if not window.include_nulls or predicate == "TRUE":
        return predicate
    if predicate == "FALSE":
        return f"{column} IS NULL"
    return f"({predicate}) OR {column} IS NULL"


def repeated_hour_start(value: datetime, timezone: str) -> datetime | None:
    """If a wall-clock `value` falls in an hour the zone repeats (DST ends), where that starts.

    Rows written during the second pass through the repeated hour carry wall-clock values below
    a cursor taken during the first pass; reading again from the start of the hour catches them.
    """
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(timezone)

    def repeated(moment: datetime) -> bool:
        # fold=0 is the offset before a transition, fold=1 the one after. They differ in a gap
        # too (clocks skipping forward), but only when clocks go back is the offset before larger.
        before = moment.replace(tzinfo=zone, fold=0).utcoffset()
        after = moment.replace(tzinfo=zone, fold=1).utcoffset()
        assert before is not None and after is not None
        return before > after

    if not repeated(value):
        return None
    low, high = value - timedelta(hours=6), value  # no zone repeats more than a few hours
    while high - low > timedelta(microseconds=1):
        middle = low + (high - low) / 2
        if repeated(middle):
            high = middle
        else:
            low = middle
    return high
