"""A MySQL or MariaDB table's log (`capture: log`): the server's binary log, read as a replica
reads it (`mysql-replication`), from the position the last run recorded to a bound frozen at the
run's start (`SHOW MASTER STATUS`).

There is no slot: the server expires binary logs on its own (`binlog_expire_logs_seconds`), so
each run first checks that the recorded position's file is still there, and refuses if it was
purged, rather than read on past the gap. Column names come from the events themselves
(`binlog_row_metadata = FULL`), so no schema history is kept. Positions are `<file>:<offset>`;
a transaction counts once its commit (XID) event is read, and a TRUNCATE (a statement of its
own) is a change.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pymysql

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType, format_binlog, parse_binlog
from incremental_assets.sources import log_changes
from incremental_assets.sources.log_changes import Change, Gathered, Log, LogRead, LogRefused
from incremental_assets.sources.log_errors import (
    lacks_error,
    lost_error,
    refused_error,
    source_failed,
)
from incremental_assets.sources.mysql_client import connect_args

# What the server must log for a table's changes to be read back whole, by name.
REQUIRED = {
    "log_bin": ("1", "ON"),
    "binlog_format": ("ROW",),
    "binlog_row_image": ("FULL",),
    "binlog_row_metadata": ("FULL",),
}
_TRUNCATE = re.compile(r"\s*truncate\s+(?:table\s+)?(?:`?(\w+)`?\.)?`?(\w+)`?\s*;?\s*$", re.I)
_TIMESTAMPS = (7, 17)  # FIELD_TYPE.TIMESTAMP, TIMESTAMP2: an instant, read back as UTC


class Binlog:
    """The binary log of one MySQL or MariaDB table."""

    cursor_type = CursorType.BINLOG

    def __init__(self, table: TableSpec) -> None:
        assert table.table is not None and isinstance(table.source, JdbcSourceSpec)
        self.table = table
        self.source = table.source
        schema, _, name = table.table.rpartition(".")
        self.relation = (schema.strip("`"), name.strip("`"))

    def begin(self, log: Log) -> str:
        """Where the binary log ends now: the table's full load reads everything before."""
        with self._connected() as conn:
            lacking = server_lacks(conn)
            if lacking:
                raise lacks_error(self.table, lacking)
            start = format_binlog(*_consistent_end(conn))
        log(f"{self.table.name}: its changes are read from the binary log from {start}")
        return start

    def read(self, previous: str) -> LogRead:
        since = parse_binlog(previous)
        with self._connected() as conn:
            kept = [str(row[0]) for row in _rows(conn, "SHOW BINARY LOGS")]
            if since[0] not in kept:
                lost = (
                    f"the binary log {since[0]} that holds its changes from {previous} is gone "
                    "(the server purged it: binlog_expire_logs_seconds, or PURGE BINARY LOGS)"
                )
                raise lost_error(self.table, lost, previous)
            bound = _end(conn)
        try:
            gathered, last, more = self._gathered(since, bound)
        except LogRefused as exc:
            raise refused_error(self.table, exc) from None
        except pymysql.Error as exc:
            raise source_failed(self.table, exc, "reading the binary log") from None
        return LogRead(
            since=previous,
            position=format_binlog(*(last if more else bound)),
            gathered=gathered,
            more=more,
            retained=None,
        )

    def _gathered(
        self, since: tuple[str, int], bound: tuple[str, int]
    ) -> tuple[Gathered, tuple[str, int], bool]:
        """The table's changes from `since` to `bound`, the end of the last transaction read,
        and whether the read stopped at `CHANGES_PER_RUN` before the bound."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        args = connect_args(self.source)
        settings = {k: args[k] for k in ("host", "port", "user")} | {"passwd": args["password"]}
        stream = BinLogStreamReader(
            connection_settings=settings,
            server_id=_replica_id(self.table.name),
            log_file=since[0],
            log_pos=since[1],
            resume_stream=True,
            blocking=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent],
            enable_logging=False,
        )
        found = Gathered(position=_number(since))
        last = since
        pending: list[Change] = []
        limit = log_changes.CHANGES_PER_RUN
        try:
            for event in stream:
                at = (str(stream.log_file), int(event.packet.log_pos))
                if _number(at) > _number(bound):
                    break
                if isinstance(event, QueryEvent):
                    query = event.query if isinstance(event.query, str) else ""
                    if query.strip().upper() == "BEGIN":
                        pending = []
                        continue
                    truncated = _TRUNCATE.match(query)
                    if truncated is not None and self._is(
                        truncated[1] or _text(event.schema), truncated[2]
                    ):
                        pending = [Change.truncate(_number(at))]
                elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                    if self._is(event.schema, event.table):
                        pending.extend(_changes(event, _number(at)))
                    continue
                # A commit (XID), or a statement that commits on its own (DDL, TRUNCATE, COMMIT)
                found.changes.extend(pending)
                found.transactions += 1
                found.position, last = _number(at), at
                pending = []
                if len(found.changes) >= limit:
                    return found, last, True
        finally:
            stream.close()
        return found, last, False

    def _is(self, schema: object, name: object) -> bool:
        return (_text(schema), _text(name)) == self.relation

    @contextmanager
    def _connected(self) -> Iterator[pymysql.Connection[Any]]:
        try:
            conn = pymysql.connect(**connect_args(self.source))
        except pymysql.Error as exc:
            raise source_failed(self.table, exc, "connecting") from None
        try:
            yield conn
        except pymysql.Error as exc:
            raise source_failed(self.table, exc, "reading the binary log's state") from None
        finally:
            conn.close()


def server_lacks(conn: pymysql.Connection[Any]) -> list[str]:
    """What the server lacks for log capture, each with the fix."""
    names = ", ".join(f"@@{name}" for name in REQUIRED)
    try:
        (values,) = _rows(conn, f"SELECT {names}")
    except pymysql.Error:  # a server without one of them (binlog_row_metadata: before 8.0.1/10.5)
        return [
            "the server can't log column names with its row events (binlog_row_metadata needs "
            "MySQL 8.0.1 or MariaDB 10.5): capture the table with a `cursor:`"
        ]
    lacking = [
        f"{name} is {value}, not {wanted[-1]}: set {name} = {wanted[-1]} on the server"
        for (name, wanted), value in zip(REQUIRED.items(), values, strict=True)
        if str(value).upper() not in wanted
    ]
    return lacking


def _consistent_end(conn: pymysql.Connection[Any]) -> tuple[str, int]:
    """Where the binary log ends for a consistent snapshot: every transaction before it is
    visible to that snapshot, and so to every later one (the load's). MariaDB tells it exactly
    (`binlog_snapshot_file`). MySQL doesn't: there it is the log's end now, and a transaction
    written to the log in the instant before InnoDB commits it may be missing from the load
    (docs/semantics.md)."""
    with conn.cursor() as cursor:
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            found = {str(k): v for k, v in cursor.fetchall()}
        finally:
            cursor.execute("COMMIT")
    if found.get("binlog_snapshot_file"):
        return str(found["binlog_snapshot_file"]), int(found["binlog_snapshot_position"])
    return _end(conn)


def _end(conn: pymysql.Connection[Any]) -> tuple[str, int]:
    """Where the binary log ends now (SHOW MASTER STATUS; SHOW BINARY LOG STATUS on MySQL 8.4)."""
    for statement in ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"):
        try:
            rows = _rows(conn, statement)
        except pymysql.err.ProgrammingError:
            continue
        if rows:
            return str(rows[0][0]), int(rows[0][1])
    raise pymysql.err.OperationalError(
        0, "the server reports no binary log (SHOW MASTER STATUS is empty): is log_bin on?"
    )


def _rows(conn: pymysql.Connection[Any], statement: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall())


def _number(position: tuple[str, int]) -> int:
    """A position as one number that orders as the log does: the file's sequence, the offset."""
    return (int(position[0].rsplit(".", 1)[1]) << 32) | position[1]


def _replica_id(table: str) -> int:
    """The server id this reader gives itself: stable per table, unlike any real server's."""
    return 0x40000000 | (zlib.crc32(table.encode()) & 0x3FFFFFFF)


def _changes(event: Any, lsn: int) -> Iterator[Change]:
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    kinds = {c.name: c.type for c in event.columns}
    for row in event.rows:
        if isinstance(event, UpdateRowsEvent):
            new = _texts(row["after_values"], kinds)
            yield Change("update", lsn, new, old=_texts(row["before_values"], kinds))
        elif isinstance(event, DeleteRowsEvent):
            yield Change("delete", lsn, _texts(row["values"], kinds))
        else:
            yield Change("insert", lsn, _texts(row["values"], kinds))


def _texts(values: dict[str, Any], kinds: dict[str, int]) -> dict[str, str | None]:
    return {name: _value_text(value, kinds.get(name)) for name, value in values.items()}


def _value_text(value: Any, kind: int | None) -> str | None:
    """A value as text the run's casts read as the full load would (`log_load._cast`)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        text = value.isoformat(sep=" ")
        return f"{text}+00:00" if kind in _TIMESTAMPS else text
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
        return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, set):
        return ",".join(sorted(value))
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Decimal | int | float | str):
        return str(value)
    return str(value)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
