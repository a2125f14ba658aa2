"""Cheap "is there anything new?" probes for sensors: plain DB-API and file listings, no JVM.

Each probe returns a short description of what is new (the newest cursor value a run would load,
the newest file a run would read), or None when a run would find nothing past the stored state.
The probes apply the same limits as a run (`safety_lag`, `future_tolerance`, the transaction
cap), so rows a run would hold back don't ask for a run that can't load them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.config.rules import time_limits
from incremental_assets.cursor import CursorType, format_cursor, parse_cursor
from incremental_assets.errors import SourceError, TableProblem
from incremental_assets.results import StoredState
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.database import Connection, Database, described, fetch_row
from incremental_assets.sources.freeze_sql import newest_loadable, relation_of
from incremental_assets.sources.listing import source_files


def probe_source(table: TableSpec, stored: StoredState, last_run: datetime | None) -> str | None:
    """What a run would load now, or None. `last_run`: when the last run that read files began."""
    if isinstance(table.source, FilesSourceSpec):
        return _probe_files(table, table.source, last_run)
    return _probe_database(table, table.source, stored)


def _probe_database(table: TableSpec, source: JdbcSourceSpec, stored: StoredState) -> str | None:
    database = database_of(source)
    try:
        conn = database.connect(source)
    except database.driver_errors as exc:
        fix = "fix the connection settings of the source (url, user, password, properties)"
        raise _probe_error(table, source, exc, fix) from None
    try:
        if table.cursor is None:
            return _table_changes(conn, database, table, stored)
        return _newest_cursor(conn, database, table, stored)
    except database.driver_errors as exc:
        fix = f"fix `table:`, `query:` or `cursor:` of table '{table.name}'"
        raise _probe_error(table, source, exc, fix) from None
    finally:
        conn.close()


def _probe_error(
    table: TableSpec, source: JdbcSourceSpec, exc: BaseException, fix: str
) -> SourceError:
    message = " ".join(str(exc).split())
    return SourceError(
        TableProblem(
            table.name,
            f"the sensor's probe failed: {message}.",
            fix=f"{fix}, or stop the sensor; the tick is marked failed until then.",
            source=f"source '{source.name}', {source.redacted_url()}",
        )
    )


def _newest_cursor(
    conn: Connection, database: Database, table: TableSpec, stored: StoredState
) -> str | None:
    """The newest cursor value past the stored one that a run would load now.

    The same statements as a run's freeze (`sources/freeze_sql.py`), so rows a run would hold
    back don't ask for a run, and what a run would refuse fails the tick with the same message.
    """
    assert table.cursor is not None
    relation = relation_of(table)
    kind = stored.cursor_type or table.cursor.declared_type
    if kind is None:
        kind = _column_type(conn, database, table, relation)
    previous = None
    if stored.cursor is not None and stored.cursor_type is not None:
        previous = parse_cursor(stored.cursor_type, stored.cursor)
    request = FreezeRequest(
        cursor=Cursor(table.cursor.column, kind),
        lower=previous,
        timezone=table.timezone,
        limits=time_limits(table, kind),
    )
    newest = newest_loadable(table, database, request, lambda sql: fetch_row(conn, sql))
    return None if newest is None or newest == previous else format_cursor(kind, newest)


def _column_type(
    conn: Connection, database: Database, table: TableSpec, relation: str
) -> CursorType:
    """The cursor's type before any run has recorded it, from the column's database type."""
    assert table.cursor is not None
    column = next(c for c in described(conn, relation) if c[0] == table.cursor.column)
    return database.cursor_type(column[1])


def _table_changes(
    conn: Connection, database: Database, table: TableSpec, stored: StoredState
) -> str | None:
    """A table without a cursor: the database's own record of changes to it."""
    if table.query is not None:
        return None if stored.run_id else "first"
    row = fetch_row(conn, database.table_changes_sql(table))
    if row["unrecorded"]:
        raise SourceError(
            TableProblem(
                table.name,
                f"the source keeps no record of its changes to {table.table} (a view, or a "
                "partitioned table on PostgreSQL), so the sensor can't tell when it changed.",
                "cursor",
                "give the table a `cursor:` (a column that grows with each change), point "
                "`table:` at the base table, or load it on a schedule and stop the sensor.",
            )
        )
    if row["changes"] is None:
        raise SourceError(
            TableProblem(
                table.name,
                f"the source has no table {table.table} (its catalog lists no such table).",
                "table",
                "name the table as schema.table (database.table on MySQL), or stop the sensor.",
            )
        )
    return f"changes:{row['changes']}" if row["settled"] else None


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
