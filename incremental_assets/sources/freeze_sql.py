"""Freezing a window's upper bound, in any source database's dialect, over any connection.

`freeze` (and a sensor's `newest_loadable`) is the one sequence every caller runs: the session
check, the other sessions' open transactions (for the transaction cap), then the bounds query.
A load runs it over Spark's JDBC reader, a run's check for nothing new and a sensor's probe over
a plain DB-API connection: the same statements in the same order, so a change to the cap or the
session check reaches all three, and they agree on what a run would load.

* the bounds query (`bounds_sql`): the window's max cursor, capped at now - safety_lag and below
  the transaction cap, with what else a run needs (row count, partition range, NULL cursors,
  ties at the bound, the clock for the future cap);
* the newest loadable value (`newest_sql`), for sensors.

The SQL is portable between PostgreSQL and MySQL/MariaDB: conditional aggregates are CASE
expressions, and the "is some row dated after the clock?" test is a one-row derived table joined
beside the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from incremental_assets.config import TableSpec
from incremental_assets.cursor import CursorType, CursorValue
from incremental_assets.dialects import SourceDialect
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    TransactionCap,
    decode_upper,
    freeze_window,
    join_conditions,
)
from incremental_assets.sources.database import Database, Query
from incremental_assets.sources.transactions import OpenTransactions, cap_limits
from incremental_assets.window import render_window


def freeze(table: TableSpec, database: Database, request: FreezeRequest, run: Query) -> Bounds:
    """The window's frozen bounds: check the session, read open transactions, then the bounds."""
    return freeze_below(
        table, database, request, open_transactions(table, database, request, run), run
    )


def open_transactions(
    table: TableSpec, database: Database, request: FreezeRequest, run: Query
) -> OpenTransactions | None:
    """The first half of a freeze: the session check, then (under the cap) the other sessions'
    open transactions, read in a statement of their own before the bounds query."""
    database.check_session(table, run)
    if not request.limits.transaction_cap:
        return None
    open_ = database.read_open_transactions(run)
    cap_limits(table, open_)  # refuses what the cap can't see, before anything is read
    return open_


def freeze_below(
    table: TableSpec,
    database: Database,
    request: FreezeRequest,
    open_: OpenTransactions | None,
    run: Query,
) -> Bounds:
    """The second half of a freeze: the bounds query, kept below `open_` under the cap."""
    row = run(bounds_sql(database.dialect, relation_of(table), request, open_))
    return bounds_from_row(table, request, row, open_)


def newest_loadable(
    table: TableSpec, database: Database, request: FreezeRequest, run: Query
) -> CursorValue | None:
    """The highest cursor value a run would load now and could record (`newest_sql`)."""
    open_ = open_transactions(table, database, request, run)
    wire = run(newest_sql(database.dialect, relation_of(table), request, open_))["newest"]
    return decode_upper(table, request.cursor, None if wire is None else str(wire))


@dataclass(frozen=True)
class _Limits:
    """A freeze's limits as SQL, shared by the bounds query and the sensor's probe."""

    cursor: str  # the quoted cursor column
    in_window: str  # the lower bound, and a backfill's upper limit
    lagged: str  # not younger than safety_lag
    below_cap: str  # below the transaction cap, unless some row is dated after the clock
    ahead: str  # whether some row is dated after the clock: `ahead.dated` in `below_cap`
    future: str | None  # the highest value the cursor may take: the clock plus future_tolerance

    @property
    def loadable(self) -> str:
        return join_conditions([self.lagged, self.below_cap])

    def rows(self, relation: str, select: str, where: str) -> str:
        """`SELECT <select>` over the rows matching `where`, with `ahead.dated` beside them."""
        return (
            f"SELECT {select} FROM {relation} CROSS JOIN (SELECT {self.ahead} AS dated) AS ahead "
            f"WHERE {where}"
        )


def _limits(
    d: SourceDialect, relation: str, request: FreezeRequest, open_: OpenTransactions | None
) -> _Limits:
    kind, timezone = request.cursor.type, request.timezone
    cursor = d.quote(request.cursor.column)
    in_window = render_window(freeze_window(request), d)
    lagged = request.lagged(d)
    cap = None
    if open_ is not None:
        cap = d.cursor_time(kind, d.literal(CursorType.TIMESTAMPTZ, open_.cap), timezone)
    below_cap = "TRUE" if cap is None else f"({cursor} < {cap} OR ahead.dated)"
    # A row dated after the clock can't be a late commit's: its run reads everything and the
    # cursor stops at the cap instead (through `future`), so such rows don't wait for years.
    ahead = "FALSE"
    if cap is not None:
        clock = d.cursor_time(kind, d.clock, timezone)
        where = join_conditions([in_window, lagged])
        ahead = f"EXISTS (SELECT 1 FROM {relation} WHERE {where} AND {cursor} > {clock})"
    future = None
    if request.limits.future_tolerance is not None:
        future = d.now_plus(kind, request.limits.future_tolerance, timezone)
    if cap is not None:
        future = cap if future is None else f"least({future}, {cap})"
    return _Limits(cursor, in_window, lagged, below_cap, ahead, future)


def bounds_sql(
    d: SourceDialect, relation: str, request: FreezeRequest, open_: OpenTransactions | None
) -> str:
    """The bounds query, kept below `open_` (read before it) when the transaction cap applies."""
    kind = request.cursor.type
    limits = _limits(d, relation, request, open_)
    cursor, loadable = limits.cursor, limits.loadable
    part = request.partitioning
    part_column = d.quote(part.column) if part else "NULL"
    part_type = part.type if part else CursorType.INTEGER

    def when(condition: str, value: str) -> str:
        return f"CASE WHEN {condition} THEN {value} END"

    aggregates = (
        f"max({when(loadable, cursor)}) AS m, count({when(loadable, '1')}) AS n, "
        f"count({when(f'{limits.lagged} AND NOT {limits.below_cap}', '1')}) AS held, "
        f"max({cursor}) AS newest, "
        f"min({when(loadable, part_column)}) AS pl, max({when(loadable, part_column)}) AS ph"
    )
    window = limits.rows(relation, aggregates, limits.in_window)
    future = "NULL" if limits.future is None else d.wire(kind, limits.future)
    return (
        f"SELECT {d.wire(kind, 'w.m')} AS upper, {d.wire(kind, 'w.newest')} AS newest, "
        f"w.n AS n, w.held AS held, "
        f"{d.wire(part_type, 'w.pl')} AS part_low, {d.wire(part_type, 'w.ph')} AS part_high, "
        f"(SELECT count(*) FROM {relation} WHERE {cursor} IS NULL) AS null_rows, "
        f"(SELECT count(*) FROM {relation} WHERE {cursor} = w.m) AS boundary_rows, "
        f"{future} AS future_cap FROM ({window}) AS w"
    )


def newest_sql(
    d: SourceDialect, relation: str, request: FreezeRequest, open_: OpenTransactions | None
) -> str:
    """The highest cursor value a run would load now and could record as its cursor.

    A sensor asks for a run when this is past the stored cursor: rows a run would hold back
    (safety_lag, the transaction cap) or read without moving the cursor to them (dated past the
    future cap) don't ask for a run that can't take the cursor there.
    """
    limits = _limits(d, relation, request, open_)
    conditions = [limits.in_window, limits.loadable]
    if limits.future is not None:
        conditions.append(f"{limits.cursor} <= {limits.future}")
    select = limits.rows(relation, f"max({limits.cursor}) AS m", join_conditions(conditions))
    return f"SELECT {d.wire(request.cursor.type, 'w.m')} AS newest FROM ({select}) AS w"


def bounds_from_row(
    table: TableSpec,
    request: FreezeRequest,
    row: Mapping[str, Any],
    open_: OpenTransactions | None,
) -> Bounds:
    partitioned = request.partitioning is not None
    transaction = None
    if open_ is not None:
        transaction = TransactionCap(
            open_.oldest_start,
            open_.holder,
            open_.hidden_sessions,
            int(row["held"]),
            cap_limits(table, open_),
        )
    return Bounds(
        upper=decode_upper(table, request.cursor, row["upper"]),
        rows=int(row["n"]),
        newest=decode_upper(table, request.cursor, row["newest"]),
        partition_low=_integer(row["part_low"]) if partitioned else None,
        partition_high=_integer(row["part_high"]) if partitioned else None,
        null_rows=int(row["null_rows"]),
        boundary_rows=int(row["boundary_rows"] or 0),
        future_cap=decode_upper(table, request.cursor, row["future_cap"]),
        transaction=transaction,
    )


def relation_of(table: TableSpec) -> str:
    """What the table reads, as a FROM item: the table, or its query as a subquery."""
    return f"({table.query}) AS q" if table.query is not None else str(table.table)


def _integer(text: str | None) -> int | None:
    return None if text is None else int(text)
