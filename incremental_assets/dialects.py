"""How each SQL engine spells identifiers, literals, its clock and the wire form of a value.

PostgreSQL and MySQL (or MariaDB) render a run's SQL for the source; Spark SQL pushes windows into
file scans. The wire form of a bound is chosen to be independent of every time zone setting:
epoch microseconds for timestamps, epoch days for dates, exact text for the rest. MySQL sessions
are pinned to UTC (`time_zone = '+00:00'`) so that a TIMESTAMP reads as its instant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from incremental_assets.cursor import CursorType, CursorValue, format_cursor


class Dialect(Protocol):
    """How one SQL engine spells identifiers, literals and the wire form of a value."""

    name: str

    def quote(self, identifier: str) -> str: ...

    def literal(self, cursor_type: CursorType, value: CursorValue) -> str: ...

    def wire(self, cursor_type: CursorType, expression: str) -> str: ...

    def now_plus(self, cursor_type: CursorType, delta: timedelta, timezone: str) -> str: ...


class SourceDialect(Dialect, Protocol):
    """A database's dialect: also its clock, and a value as epoch numbers or text."""

    clock: str  # the server's clock, as the instant expression `cursor_time` takes

    def cursor_time(self, cursor_type: CursorType, instant: str, timezone: str) -> str: ...

    def epoch(self, cursor_type: CursorType, expression: str) -> str: ...

    def text(self, expression: str) -> str: ...


def sql_string(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _micros(lag: timedelta) -> int:
    return lag // timedelta(microseconds=1)


class PostgresDialect:
    name = "postgres"
    clock = "now()"

    def quote(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def literal(self, cursor_type: CursorType, value: CursorValue) -> str:
        text = format_cursor(cursor_type, value)
        if cursor_type in (CursorType.INTEGER, CursorType.DECIMAL):
            return text
        if cursor_type is CursorType.DATE:
            return f"DATE '{text}'"
        if cursor_type is CursorType.TIMESTAMP:
            return f"TIMESTAMP '{text.replace('T', ' ')}'"
        if cursor_type is CursorType.TIMESTAMPTZ:
            return f"TIMESTAMPTZ '{text.replace('T', ' ')}'"
        # An escape string reads the same whether or not the session has
        # standard_conforming_strings on; a plain one doesn't if it holds a backslash.
        return "E" + sql_string(text.replace("\\", "\\\\"))

    def wire(self, cursor_type: CursorType, expression: str) -> str:
        if cursor_type.is_temporal:
            return self.text(self.epoch(cursor_type, expression))
        return self.text(expression)

    def text(self, expression: str) -> str:
        return f"CAST({expression} AS TEXT)"

    def epoch(self, cursor_type: CursorType, expression: str) -> str:
        """A date as days since 1970-01-01, a timestamp as microseconds since then (a bigint).

        Of a timestamp without time zone, EXTRACT(EPOCH) is nominal: no zone is consulted. Unlike
        to_char, it keeps BC years apart and fails on 'infinity' instead of giving NULL.
        """
        if cursor_type is CursorType.DATE:
            return f"{expression} - DATE '1970-01-01'"
        return f"CAST(EXTRACT(EPOCH FROM {expression}) * 1000000 AS BIGINT)"

    def now_plus(self, cursor_type: CursorType, delta: timedelta, timezone: str) -> str:
        """The server's clock moved by `delta`, as a value comparable with the cursor."""
        return self.cursor_time(
            cursor_type, f"(now() + INTERVAL '{_micros(delta)} microseconds')", timezone
        )

    def cursor_time(self, cursor_type: CursorType, instant: str, timezone: str) -> str:
        """A timestamptz expression as the cursor's type: wall clock in `timezone`, or its date."""
        if cursor_type is CursorType.TIMESTAMP:
            return f"({instant} AT TIME ZONE {sql_string(timezone)})"
        if cursor_type is CursorType.DATE:
            return f"CAST({instant} AT TIME ZONE {sql_string(timezone)} AS DATE)"
        return instant


class SparkSqlDialect:
    """Spark SQL, used to push windows into file scans. `now` is this process's clock."""

    name = "spark"

    def quote(self, identifier: str) -> str:
        return "`" + identifier.replace("`", "``") + "`"

    def unquote(self, identifier: str) -> str:
        """A name as `quote` wrote it, back; a bare name as it is."""
        if len(identifier) > 1 and identifier[0] == identifier[-1] == "`":
            return identifier[1:-1].replace("``", "`")
        return identifier

    def literal(self, cursor_type: CursorType, value: CursorValue) -> str:
        text = format_cursor(cursor_type, value)
        if cursor_type is CursorType.INTEGER:
            return f"{text}L"
        if cursor_type is CursorType.DECIMAL:
            return f"{text}BD"
        if cursor_type is CursorType.DATE:
            return f"DATE '{text}'"
        if cursor_type is CursorType.TIMESTAMP:
            return f"TIMESTAMP_NTZ '{text.replace('T', ' ')}'"
        if cursor_type is CursorType.TIMESTAMPTZ:
            return f"TIMESTAMP_LTZ '{text.replace('T', ' ')}'"
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def wire(self, cursor_type: CursorType, expression: str) -> str:
        if cursor_type is CursorType.TIMESTAMPTZ:
            return f"CAST(unix_micros({expression}) AS STRING)"
        if cursor_type is CursorType.DATE:
            return f"CAST(unix_date({expression}) AS STRING)"
        return f"CAST({expression} AS STRING)"

    def now_plus(self, cursor_type: CursorType, delta: timedelta, timezone: str) -> str:
        return self.literal(cursor_type, local_clock(cursor_type, delta, timezone))


def local_clock(
    cursor_type: CursorType, delta: timedelta, timezone: str, now: datetime | None = None
) -> CursorValue:
    """This process's clock (or `now`) moved by `delta`, as a value of a time cursor's type."""
    from zoneinfo import ZoneInfo

    # Move the instant, then read the wall clock: aware arithmetic in a zone is wall-clock
    # arithmetic, which would stretch or shrink `delta` across a daylight saving change.
    moved = ((now or datetime.now(UTC)) + delta).astimezone(ZoneInfo(timezone))
    if cursor_type is CursorType.TIMESTAMPTZ:
        return moved
    if cursor_type is CursorType.DATE:
        return moved.date()
    return moved.replace(tzinfo=None)


class MySqlDialect:
    """MySQL and MariaDB, in a session pinned to UTC (`time_zone = '+00:00'`).

    A TIMESTAMP column then reads as its instant's UTC wall clock, a DATETIME as it is written;
    the clock is UTC_TIMESTAMP(6). Named zones (`timezone:` of a DATETIME cursor) need the
    server's time zone tables.
    """

    name = "mysql"
    clock = "UTC_TIMESTAMP(6)"

    def quote(self, identifier: str) -> str:
        return "`" + identifier.replace("`", "``") + "`"

    def literal(self, cursor_type: CursorType, value: CursorValue) -> str:
        if cursor_type is CursorType.TIMESTAMPTZ:
            assert isinstance(value, datetime)
            value = value.astimezone(UTC).replace(tzinfo=None)
            cursor_type = CursorType.TIMESTAMP
        text = format_cursor(cursor_type, value)
        if cursor_type in (CursorType.INTEGER, CursorType.DECIMAL):
            return text
        if cursor_type is CursorType.DATE:
            return f"DATE '{text}'"
        if cursor_type is CursorType.TIMESTAMP:
            return f"TIMESTAMP '{text.replace('T', ' ')}'"
        # A backslash escapes in MySQL strings unless the SQL mode has NO_BACKSLASH_ESCAPES,
        # which the server's users' queries may rely on: such text travels as hex, read the same
        # either way.
        if "\\" in text or "\0" in text:
            return f"_utf8mb4 X'{text.encode().hex()}'"
        return sql_string(text)

    def wire(self, cursor_type: CursorType, expression: str) -> str:
        if cursor_type.is_temporal:
            return self.text(self.epoch(cursor_type, expression))
        return self.text(expression)

    def text(self, expression: str) -> str:
        return f"CAST({expression} AS CHAR)"

    def epoch(self, cursor_type: CursorType, expression: str) -> str:
        """Days (a date) or microseconds (a DATETIME, or a TIMESTAMP in UTC) since 1970-01-01."""
        if cursor_type is CursorType.DATE:
            return f"DATEDIFF({expression}, DATE '1970-01-01')"
        return f"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP '1970-01-01 00:00:00', {expression})"

    def now_plus(self, cursor_type: CursorType, delta: timedelta, timezone: str) -> str:
        return self.cursor_time(
            cursor_type, f"({self.clock} + INTERVAL {_micros(delta)} MICROSECOND)", timezone
        )

    def cursor_time(self, cursor_type: CursorType, instant: str, timezone: str) -> str:
        """A UTC wall-clock expression as the cursor's type: wall clock in `timezone`, or its
        date."""
        local = instant
        if cursor_type is not CursorType.TIMESTAMPTZ and timezone != "UTC":
            local = f"CONVERT_TZ({instant}, '+00:00', {sql_string(timezone)})"
        return f"DATE({local})" if cursor_type is CursorType.DATE else local


POSTGRES = PostgresDialect()
MYSQL = MySqlDialect()
SPARK_SQL = SparkSqlDialect()
