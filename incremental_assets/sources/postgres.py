"""PostgreSQL's statements for freezing a window, run by a load over JDBC and by a probe over psycopg.

Both read the same two statements, so a sensor asks for a run exactly when a run would load
something:

* the other sessions' open transactions, in a statement of their own (`OPEN_TRANSACTIONS`);
* the bounds query (`bounds_sql`): the window's max cursor, capped at now - safety_lag and below
  the transaction cap, with what else a run needs (row count, partition range, NULL cursors,
  ties at the bound, the clock for the future cap).

The transaction cap must never fail open in silence. What it can't see makes the run hold back
further (sessions with `track_activities = off`: below their connection time), or refuse unless
a `lookback` covers late commits (a hot standby, where the primary's transactions are invisible;
prepared transactions, whose start PostgreSQL doesn't keep), and the run says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from incremental_assets.config import TableSpec
from incremental_assets.cursor import EPOCH_UTC, CursorType, format_cursor
from incremental_assets.errors import SourceError
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    TransactionCap,
    decode_upper,
    freeze_window,
    join_conditions,
)
from incremental_assets.window import POSTGRES, render_window

APPLICATION_NAME = "incremental_assets"
_OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
# Sessions that can hold rows back: other clients of this database, not our own read-only reads.
_CLIENTS = (
    f"{_OTHER_SESSIONS} AND backend_type = 'client backend' "
    f"AND coalesce(application_name, '') <> '{APPLICATION_NAME}'"
)
_WRITERS = f"{_CLIENTS} AND xact_start IS NOT NULL"
# track_activities = off: the session reports no transaction, though it may have one open.
_UNTRACKED = f"{_CLIENTS} AND state = 'disabled'"
_PREPARED = "FROM pg_prepared_xacts WHERE database = current_database()"


def _instant_sql(expression: str) -> str:
    return POSTGRES.wire(CursorType.TIMESTAMPTZ, expression)


OPEN_TRANSACTIONS = (
    f"SELECT {_instant_sql('now()')} AS read_at, "
    f"{_instant_sql(f'(SELECT min(xact_start) {_WRITERS})')} AS oldest, "
    "(SELECT format('pid %s (%s), open since %s', pid, coalesce(nullif(application_name, ''), usename), "
    f"xact_start) {_WRITERS} ORDER BY xact_start LIMIT 1) AS holder, "
    # Without pg_read_all_stats, other roles' sessions show no transaction start at all, nor
    # their backend_type; autovacuum workers are the ones with no role.
    f"(SELECT count(*) {_OTHER_SESSIONS} AND query = '<insufficient privilege>' "
    "AND usesysid IS NOT NULL) AS hidden, "
    f"(SELECT count(*) {_UNTRACKED}) AS untracked, "
    f"{_instant_sql(f'(SELECT min(backend_start) {_UNTRACKED})')} AS untracked_since, "
    f"(SELECT count(*) {_PREPARED}) AS prepared, "
    f"{_instant_sql(f'(SELECT min(prepared) {_PREPARED})')} AS prepared_since, "
    "pg_is_in_recovery() AS standby"
)


@dataclass(frozen=True)
class OpenTransactions:
    """Other sessions' open transactions, read before the bounds query.

    Read in a statement of its own, before the bounds query takes its snapshot: a transaction
    whose rows that snapshot can't see is then either listed here or started after `read_at`, so
    a bound below both passes none of its rows. (Read in the same statement, it would come after
    the snapshot, and miss a transaction that committed in between.)
    """

    read_at: datetime  # the server's clock when they were read
    oldest_start: datetime | None  # None: no other transaction was open
    holder: str | None  # which session, for the metadata
    hidden_sessions: int  # sessions the role can't see: the cap may be incomplete
    untracked_sessions: int = 0  # sessions with track_activities = off
    untracked_since: datetime | None = None  # the earliest of their connection times
    prepared: int = 0  # prepared (two-phase) transactions in this database
    prepared_since: datetime | None = None
    standby: bool = False  # the server is a hot standby

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> OpenTransactions:
        return OpenTransactions(
            read_at=EPOCH_UTC + timedelta(microseconds=int(row["read_at"])),
            oldest_start=_instant(row["oldest"]),
            holder=row["holder"],
            hidden_sessions=int(row["hidden"]),
            untracked_sessions=int(row["untracked"]),
            untracked_since=_instant(row["untracked_since"]),
            prepared=int(row["prepared"]),
            prepared_since=_instant(row["prepared_since"]),
            standby=bool(row["standby"]),
        )

    @property
    def cap(self) -> datetime:
        """The instant the upper bound stays strictly below.

        An untracked session may have begun a transaction at any time since it connected.
        """
        starts = [self.read_at, self.oldest_start, self.untracked_since]
        return min(s for s in starts if s is not None)


def cap_limits(table: TableSpec, open_: OpenTransactions) -> tuple[str, ...]:
    """What the cap can't see, each said as a warning; raises where only a lookback is safe."""
    limits = []
    if open_.untracked_sessions:
        since = format_cursor(CursorType.TIMESTAMPTZ, open_.untracked_since)  # type: ignore[arg-type]
        limits.append(
            f"{open_.untracked_sessions} sessions report no transactions (track_activities = off), "
            f"so the cursor was held below the earliest of their connections ({since}). Fix: turn "
            "track_activities on for the writers' sessions, or end the idle ones."
        )
    blind = []
    if open_.standby:
        blind.append(
            "the source is a hot standby (pg_is_in_recovery()), where the primary's open "
            "transactions can't be seen"
        )
    if open_.prepared:
        since = format_cursor(CursorType.TIMESTAMPTZ, open_.prepared_since)  # type: ignore[arg-type]
        blind.append(
            f"{open_.prepared} prepared transactions are open (pg_prepared_xacts, the oldest "
            f"prepared at {since}), and PostgreSQL doesn't keep when they began"
        )
    for reason in blind:
        if table.lookback is None:
            raise SourceError(
                f"Table '{table.name}', field 'transaction_cap': {reason}, so the cap can't keep "
                "the cursor below rows that commit late. Nothing was read and the cursor did not "
                "move. Fix: set `lookback:` to longer than your writers' transactions stay open "
                "(plus replication delay on a standby), or read from the primary and finish the "
                "prepared transactions, or set transaction_cap: false to accept that such rows "
                "may be skipped."
            )
        limits.append(
            f"{reason}; rows that commit late are caught only by the lookback ({table.lookback})"
        )
    return tuple(limits)


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

    def capped(self, select: str) -> str:
        """`select` over the rows in the window, with `ahead.dated` computed once beside them."""
        return f"FROM (SELECT {self.ahead} AS dated) AS ahead CROSS JOIN LATERAL ({select}) AS w"


def _limits(relation: str, request: FreezeRequest, open_: OpenTransactions | None) -> _Limits:
    d = POSTGRES
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
        clock = d.cursor_time(kind, "now()", timezone)
        where = join_conditions([in_window, lagged])
        ahead = f"EXISTS (SELECT 1 FROM {relation} WHERE {where} AND {cursor} > {clock})"
    future = None
    if request.limits.future_tolerance is not None:
        future = d.now_plus(kind, request.limits.future_tolerance, timezone)
    if cap is not None:
        future = cap if future is None else f"least({future}, {cap})"
    return _Limits(cursor, in_window, lagged, below_cap, ahead, future)


def bounds_sql(relation: str, request: FreezeRequest, open_: OpenTransactions | None) -> str:
    """The bounds query, kept below `open_` (read before it) when the transaction cap applies."""
    d, kind = POSTGRES, request.cursor.type
    limits = _limits(relation, request, open_)
    cursor, loadable = limits.cursor, limits.loadable
    part = request.partitioning
    part_column = d.quote(part.column) if part else "NULL"
    part_type = part.type if part else CursorType.INTEGER
    window = (
        f"SELECT max({cursor}) FILTER (WHERE {loadable}) AS m, count(*) FILTER (WHERE {loadable}) AS n, "
        f"count(*) FILTER (WHERE {limits.lagged} AND NOT {limits.below_cap}) AS held, "
        f"max({cursor}) AS newest, "
        f"min({part_column}) FILTER (WHERE {loadable}) AS pl, max({part_column}) FILTER (WHERE {loadable}) AS ph "
        f"FROM {relation} WHERE {limits.in_window}"
    )
    future = "NULL" if limits.future is None else d.wire(kind, limits.future)
    return (
        f"SELECT {d.wire(kind, 'w.m')} AS upper, {d.wire(kind, 'w.newest')} AS newest, w.n AS n, w.held AS held, "
        f"{d.wire(part_type, 'w.pl')} AS part_low, {d.wire(part_type, 'w.ph')} AS part_high, "
        f"(SELECT count(*) FROM {relation} WHERE {cursor} IS NULL) AS null_rows, "
        f"(SELECT count(*) FROM {relation} WHERE {cursor} = w.m) AS boundary_rows, "
        f"{future} AS future_cap {limits.capped(window)}"
    )


def newest_sql(relation: str, request: FreezeRequest, open_: OpenTransactions | None) -> str:
    """The highest cursor value a run would load now and could record as its cursor.

    A sensor asks for a run when this is past the stored cursor: rows a run would hold back
    (safety_lag, the transaction cap) or read without moving the cursor to them (dated past the
    future cap) don't ask for a run that can't take the cursor there.
    """
    limits = _limits(relation, request, open_)
    conditions = [limits.in_window, limits.loadable]
    if limits.future is not None:
        conditions.append(f"{limits.cursor} <= {limits.future}")
    select = f"SELECT max({limits.cursor}) AS m FROM {relation} WHERE {join_conditions(conditions)}"
    return f"SELECT {POSTGRES.wire(request.cursor.type, 'w.m')} AS newest {limits.capped(select)}"


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


def fingerprint_sql(relation: str, where: str) -> str:
    """How many rows match `where`, and a digest of them that doesn't depend on their order."""
    rows = f"SELECT md5(CAST(r AS text)) AS h FROM (SELECT * FROM {relation} WHERE {where}) AS r"
    return (
        "SELECT count(*) AS n, md5(coalesce(string_agg(h, '' ORDER BY h), '')) AS digest "
        f"FROM ({rows}) AS hashed"
    )


def relation_of(table: TableSpec) -> str:
    """What the table reads, as a FROM item: the table, or its query as a subquery."""
    return f"({table.query}) AS q" if table.query is not None else str(table.table)


def _integer(text: str | None) -> int | None:
    return None if text is None else int(text)


def _instant(epoch_micros: str | None) -> datetime | None:
    if epoch_micros is None:
        return None
    return EPOCH_UTC + timedelta(microseconds=int(epoch_micros))
