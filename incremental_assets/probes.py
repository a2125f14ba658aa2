"""Cheap "is there anything new?" probes for sensors: plain DB-API and file listings, no JVM.

Each probe returns a short description of what is new (the newest cursor value a run would load,
the newest file a run would read), or None when a run would find nothing past the stored state.
The probes apply the same limits as a run (`safety_lag`, `future_tolerance`, the transaction
cap), so rows a run would hold back don't ask for a run that can't load them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.config.rules import time_limits
from incremental_assets.cursor import CursorType, decode_wire, format_cursor, parse_cursor
from incremental_assets.errors import SourceError
from incremental_assets.results import StoredState
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.listing import source_files
from incremental_assets.sources.pg_client import connect, fetch_row
from incremental_assets.sources.postgres import (
    OPEN_TRANSACTIONS,
    OpenTransactions,
    cap_limits,
    newest_sql,
    relation_of,
)
from incremental_assets.window import POSTGRES

# PostgreSQL type OIDs of the columns that can be cursors; anything else compares as text.
_CURSOR_TYPE_OIDS = {
    20: CursorType.INTEGER,
    21: CursorType.INTEGER,
    23: CursorType.INTEGER,
    1700: CursorType.DECIMAL,
    1082: CursorType.DATE,
    1114: CursorType.TIMESTAMP,
    1184: CursorType.TIMESTAMPTZ,
}


def probe_source(table: TableSpec, stored: StoredState, last_run: datetime | None) -> str | None:
    """What a run would load now, or None. `last_run`: when the last run that read files began."""
    if isinstance(table.source, FilesSourceSpec):
        return _probe_files(table, table.source, last_run)
    return _probe_postgres(table, table.source, stored)


def _probe_postgres(table: TableSpec, source: JdbcSourceSpec, stored: StoredState) -> str | None:
    relation = relation_of(table)
    try:
        conn = connect(source)
    except psycopg.Error as exc:
        fix = "Fix the connection settings of the source (url, user, password, properties)"
        raise _probe_error(table, source, exc, fix) from None
    with conn:
        try:
            if table.cursor is None:
                return _table_changes(conn, table, stored)
            return _newest_cursor(conn, table, relation, stored)
        except psycopg.Error as exc:
            fix = f"Fix `table:`, `query:` or `cursor:` of table '{table.name}'"
            raise _probe_error(table, source, exc, fix) from None


def _probe_error(
    table: TableSpec, source: JdbcSourceSpec, exc: psycopg.Error, fix: str
) -> SourceError:
    message = " ".join(str(exc).split())
    return SourceError(
        f"Table '{table.name}' (source '{source.name}', {source.redacted_url()}): the sensor's probe "
        f"failed: {message}. {fix}, or stop the sensor; the tick is marked failed until then."
    )


def _newest_cursor(
    conn: psycopg.Connection, table: TableSpec, relation: str, stored: StoredState
) -> str | None:
    """The newest cursor value past the stored one that a run would load now.

    The same two statements as a run's freeze (`sources/postgres.py`), so rows a run would hold
    back don't ask for a run, and what a run would refuse fails the tick with the same message.
    """
    assert table.cursor is not None
    kind = stored.cursor_type or table.cursor.declared_type or _column_type(conn, table, relation)
    previous = None
    if stored.cursor is not None and stored.cursor_type is not None:
        previous = parse_cursor(stored.cursor_type, stored.cursor)
    limits = time_limits(table, kind)
    capped = limits.transaction_cap
    open_ = OpenTransactions.from_row(fetch_row(conn, OPEN_TRANSACTIONS)) if capped else None
    if open_ is not None:
        cap_limits(table, open_)
    request = FreezeRequest(
        Cursor(table.cursor.column, kind), previous, table.timezone, None, limits
    )
    wire = fetch_row(conn, newest_sql(relation, request, open_))["newest"]
    newest = None if wire is None else decode_wire(kind, wire)
    return None if newest is None or newest == previous else format_cursor(kind, newest)


def _column_type(conn: psycopg.Connection, table: TableSpec, relation: str) -> CursorType:
    """The cursor's type before any run has recorded it, from the column's PostgreSQL type."""
    assert table.cursor is not None
    cursor = conn.execute(f"SELECT {POSTGRES.quote(table.cursor.column)} FROM {relation} LIMIT 0")  # type: ignore[call-overload]
    oid = cursor.description[0].type_code if cursor.description else 0
    return _CURSOR_TYPE_OIDS.get(oid, CursorType.STRING)


def _table_changes(conn: psycopg.Connection, table: TableSpec, stored: StoredState) -> str | None:
    """A table without a cursor: PostgreSQL's count of inserted, updated and deleted rows."""
    if table.query is not None:
        return None if stored.run_id else "first"
    row = conn.execute(
        "SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relid = CAST(%s AS regclass)",
        (table.table,),
    ).fetchone()
    return f"changes:{row[0] if row else 0}"


def _probe_files(
    table: TableSpec, source: FilesSourceSpec, last_run: datetime | None
) -> str | None:
    """Files modified since the last run began (or, with `safety_lag`, that have aged past it since).

    With a lag, the rows of a file are assumed to be dated no later than the file was written, so
    they are all loadable once the file is `safety_lag` old.
    """
    lag_ns = (table.safety_lag or timedelta(0)) // timedelta(microseconds=1) * 1000
    since_ns = None if last_run is None else int(last_run.timestamp() * 1e9)
    now_ns = time.time_ns()
    ready = [
        info.mtime_ns or 0
        for info in source_files(source, table.table or "")
        if (since_ns is None or (info.mtime_ns or 0) + lag_ns > since_ns)
        and (info.mtime_ns or 0) + lag_ns <= now_ns
    ]
    if not ready:
        return None
    newest = datetime.fromtimestamp(max(ready) / 1e9, UTC).isoformat(timespec="microseconds")
    return f"{len(ready)} files, newest modified {newest}"
