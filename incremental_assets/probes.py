"""Cheap "is there anything new?" probes for sensors: plain DB-API and file listings, no JVM.

Each probe says what is new (the newest cursor value a run would load, the newest file a run
would read), or None when a run would find nothing past the stored state, and what it saw of the
source: its newest cursor value (or file), and what a run would read now. The probes apply the
same limits as a run (`safety_lag`, `future_tolerance`, the transaction cap), so rows a run would
hold back don't ask for a run that can't load them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.config.rules import time_limits
from incremental_assets.cursor import (
    CursorType,
    format_cursor,
    parse_binlog,
    parse_cursor,
    parse_lsn,
)
from incremental_assets.errors import SourceError, TableProblem
from incremental_assets.results import StoredState
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.database import (
    Connection,
    Database,
    Query,
    described,
    fetch_row,
    fetch_rows,
)
from incremental_assets.sources.freeze_sql import freeze, newest_loadable, relation_of
from incremental_assets.sources.listing import source_files
from incremental_assets.sources.pg_slot import names_of
from incremental_assets.window import Window, render_window


@dataclass(frozen=True)
class Probe:
    """What a tick found at the source."""

    # What a run would load now, for the run key (`30`, `changes:12`, `3 files, newest ...`), or
    # None: a run would find nothing past the stored state.
    new: str | None
    # The source's newest cursor value a run could record now (the stored one when nothing is
    # past it), as exact text; for files, the newest file's modification time. None: a table
    # without a cursor, or nothing loadable.
    newest: str | None = None
    # Rows past the stored cursor (a database), or files, a run would read now; None when not
    # counted.
    waiting: int | None = None
    # `capture: log`: the log the table's replication slot keeps (PostgreSQL; None: no slot
    # yet), and the log's end past the recorded position, in bytes
    retained: int | None = None
    behind: int | None = None


NOTHING = Probe(None)
# Whether the rows a run would read are worth counting, given the newest cursor value: counting
# them costs another scan of the rows past the stored cursor, so a sensor asks only when what it
# last recorded has changed.
CountWhen = Callable[[str | None], bool]


def probe_source(
    table: TableSpec,
    stored: StoredState,
    last_run: datetime | None,
    count_when: CountWhen = lambda _: False,
) -> Probe:
    """What a run would load now. `last_run`: when the last run that read files began."""
    if isinstance(table.source, FilesSourceSpec):
        return _probe_files(table, table.source, last_run)
    return _probe_database(table, table.source, stored, count_when)


def _probe_database(
    table: TableSpec, source: JdbcSourceSpec, stored: StoredState, count_when: CountWhen
) -> Probe:
    database = database_of(source)
    try:
        conn = database.connect(source)
    except database.driver_errors as exc:
        fix = "fix the connection settings of the source (url, user, password, properties)"
        raise _probe_error(table, source, exc, fix) from None
    try:
        if table.capture == "log" and source.url.startswith("jdbc:postgresql:"):
            return _log_probe(conn, database, table, stored)
        if table.capture == "log":
            return _binlog_probe(conn, database, table, stored)
        if table.cursor is None:
            return Probe(_table_changes(conn, database, table, stored))
        return _newest_cursor(conn, database, table, stored, count_when)
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
    conn: Connection,
    database: Database,
    table: TableSpec,
    stored: StoredState,
    count_when: CountWhen,
) -> Probe:
    """The newest cursor value past the stored one that a run would load now.

    The same statements as a run's freeze (`sources/freeze_sql.py`), so rows a run would hold
    back don't ask for a run, and what a run would refuse fails the tick with the same message.
    When `count_when` says so, the rows a run would read now are counted by the run's own bounds
    query, less those at the stored cursor: every run reads them again, and the lake holds them.
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
    run: Query = lambda sql: fetch_row(conn, sql)  # noqa: E731
    newest = newest_loadable(table, database, request, run)
    text = None if newest is None else format_cursor(kind, newest)
    waiting = None
    if count_when(text):
        read = freeze(table, database, request, run).rows
        waiting = max(0, read - _rows_at(table, database, request, run))
    return Probe(None if newest is None or newest == previous else text, text, waiting)


def _rows_at(table: TableSpec, database: Database, request: FreezeRequest, run: Query) -> int:
    """The source's rows whose cursor is the stored one (none before a first run)."""
    if request.lower is None:
        return 0
    column, kind = request.cursor.column, request.cursor.type
    at = render_window(Window(column, kind, request.lower, request.lower), database.dialect)
    return int(run(f"SELECT count(*) AS n FROM {relation_of(table)} WHERE {at}")["n"])


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


def _log_probe(
    conn: Connection, database: Database, table: TableSpec, stored: StoredState
) -> Probe:
    """A table captured from the log: changed by the database's own count, the log's end as
    the newest position, and what the table's slot keeps."""
    slot = names_of(table).slot  # [a-z0-9_]: safe in the literal
    row = fetch_row(
        conn,
        "SELECT pg_current_wal_lsn()::text AS newest, (SELECT pg_wal_lsn_diff("
        "pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
        f"WHERE slot_name = '{slot}') AS retained",
    )
    retained, newest = row["retained"], str(row["newest"])
    behind = None
    if stored.cursor is not None and stored.cursor_type is CursorType.LSN:
        behind = max(0, parse_lsn(newest) - parse_lsn(stored.cursor))
    return Probe(
        _table_changes(conn, database, table, stored),
        newest=newest,
        retained=None if retained is None else int(retained),
        behind=behind,
    )


def _binlog_probe(
    conn: Connection, database: Database, table: TableSpec, stored: StoredState
) -> Probe:
    """A table captured from a binary log: changed by the database's own count, the log's end as
    the newest position, and the bytes of log past the recorded position (`retained`)."""
    logs = [(str(r["Log_name"]), int(r["File_size"])) for r in fetch_rows(conn, "SHOW BINARY LOGS")]
    newest = f"{logs[-1][0]}:{logs[-1][1]}" if logs else None
    behind = None
    if stored.cursor is not None and stored.cursor_type is CursorType.BINLOG:
        file, offset = parse_binlog(stored.cursor)
        after = [size for name, size in logs if name >= file]
        behind = sum(after) - offset if after and logs[0][0] <= file else None
    return Probe(_table_changes(conn, database, table, stored), newest=newest, behind=behind)


def _probe_files(table: TableSpec, source: FilesSourceSpec, last_run: datetime | None) -> Probe:
    """Files modified since the last run began (or, with `safety_lag`, that have aged past it
    since).

    With a lag, the rows of a file are assumed to be dated no later than the file was written, so
    they are all loadable once the file is `safety_lag` old.
    """
    lag_ns = (table.safety_lag or timedelta(0)) // timedelta(microseconds=1) * 1000
    since_ns = None if last_run is None else int(last_run.timestamp() * 1e9)
    now_ns = time.time_ns()
    modified = [info.mtime_ns or 0 for info in source_files(source, table.table or "")]
    ready = [
        mtime
        for mtime in modified
        if (since_ns is None or mtime + lag_ns > since_ns) and mtime + lag_ns <= now_ns
    ]
    newest = _modified_text(max(modified)) if modified else None
    if not ready:
        return Probe(None, newest, 0)
    return Probe(
        f"{len(ready)} files, newest modified {_modified_text(max(ready))}", newest, len(ready)
    )


def _modified_text(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC).isoformat(timespec="microseconds")
