"""Cursor types and their exact text round trip. Pure Python: no Spark, no Dagster.

A cursor value is held as a plain Python value:

| type        | Python value                 | text form (metadata `cursor`)          |
|-------------|------------------------------|----------------------------------------|
| integer     | int                          | `9007199254740993`                     |
| decimal     | Decimal                      | `12.50` (digits as stored, never float) |
| date        | date                         | `2025-01-31`                           |
| timestamp   | naive datetime (wall clock)  | `2025-01-31T12:00:00.000001`           |
| timestamptz | aware datetime in UTC        | `2025-01-31T12:00:00.000001+00:00`     |
| string      | str                          | the text itself                        |

`timestamp` (without time zone) has no offset to print: it is a wall-clock value, and printing
`+00:00` would claim a zone the database never recorded.

Sources hand back bounds in a *wire* form chosen to be independent of every time zone setting
(JVM, Spark session, database session): timestamptz as microseconds since the epoch, dates as days
since the epoch, timestamp as microseconds since 1970-01-01 00:00 on the wall clock (PostgreSQL)
or exact text (Spark), everything else as exact text. `decode_wire` reads it; a value outside
years 1-9999 (BC, say) is an error, never a silently different value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from enum import StrEnum

from incremental_assets.errors import CursorError

EPOCH_DATE = date(1970, 1, 1)
EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)

CursorValue = int | Decimal | date | datetime | str


class CursorType(StrEnum):
    INTEGER = "integer"
    DECIMAL = "decimal"
    DATE = "date"
    TIMESTAMP = "timestamp"
    TIMESTAMPTZ = "timestamptz"
    STRING = "string"
    # A position in PostgreSQL's write-ahead log, the cursor of a table captured from the log
    # (`capture: log`); never a column's, so no name in CURSOR_TYPE_ALIASES chooses it.
    LSN = "lsn"
    # A position in MySQL's or MariaDB's binary log, `<file>:<offset>` (`mariadb-bin.000003:1234`)
    BINLOG = "binlog"

    @property
    def is_temporal(self) -> bool:
        return self in (CursorType.DATE, CursorType.TIMESTAMP, CursorType.TIMESTAMPTZ)

    @property
    def is_log_position(self) -> bool:
        return self in (CursorType.LSN, CursorType.BINLOG)

    @property
    def is_timestamp(self) -> bool:
        return self in (CursorType.TIMESTAMP, CursorType.TIMESTAMPTZ)


CURSOR_TYPE_ALIASES: dict[str, CursorType] = {
    "integer": CursorType.INTEGER,
    "int": CursorType.INTEGER,
    "bigint": CursorType.INTEGER,
    "long": CursorType.INTEGER,
    "decimal": CursorType.DECIMAL,
    "numeric": CursorType.DECIMAL,
    "date": CursorType.DATE,
    "timestamp": CursorType.TIMESTAMP,
    "timestamp_ntz": CursorType.TIMESTAMP,
    "datetime": CursorType.TIMESTAMP,
    "timestamptz": CursorType.TIMESTAMPTZ,
    "timestamp_ltz": CursorType.TIMESTAMPTZ,
    "string": CursorType.STRING,
    "text": CursorType.STRING,
    "varchar": CursorType.STRING,
}


def cursor_type_from_name(name: str) -> CursorType:
    """Map a type name (or a common alias such as `bigint`, `numeric`, `text`) to a CursorType."""
    try:
        return CURSOR_TYPE_ALIASES[name.strip().lower()]
    except KeyError:
        allowed = ", ".join(t.value for t in CursorType if not t.is_log_position)
        raise CursorError(f"'{name}' is not a cursor type; use one of {allowed}.") from None


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?)?"
    r"\s*(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?"
)


def parse_cursor(cursor_type: CursorType, text: str) -> CursorValue:
    """Parse the exact text form of a cursor. Raises CursorError naming the value and the type."""
    text = text.strip() if cursor_type is not CursorType.STRING else text
    try:
        return _PARSERS[cursor_type](text)
    except (ValueError, InvalidOperation, OverflowError) as exc:
        raise CursorError(
            f"'{text}' is not a valid {cursor_type.value} cursor value ({exc})."
        ) from None


def _parse_integer(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError("expected whole-number digits")
    return int(text)


def parse_decimal(text: str) -> Decimal:
    """Decimal digits, exactly as written (`1.50`, `-2`, `1.5e3`). Raises ValueError."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError("expected a finite number in decimal digits")
    return Decimal(text)


def _parse_date(text: str) -> date:
    if not _DATE.fullmatch(text):
        raise ValueError("expected YYYY-MM-DD")
    return date.fromisoformat(text)


def _parse_timestamp(text: str, aware: bool) -> datetime:
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        raise ValueError("expected ISO 8601, e.g. 2025-01-31T12:00:00.000001+00:00")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    if fraction and len(fraction) > 6 and set(fraction[6:]) != {"0"}:
        raise ValueError("more precision than microseconds would be lost")
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    value = datetime(
        int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micros
    )
    if offset is None:
        return value.replace(tzinfo=UTC) if aware else value
    if not aware:
        raise ValueError("a timestamp without time zone can't carry an offset")
    return datetime.fromisoformat(value.isoformat() + _normalise_offset(offset)).astimezone(UTC)


def _normalise_offset(offset: str) -> str:
    if offset == "Z":
        return "+00:00"
    digits = offset[1:].replace(":", "")
    return f"{offset[0]}{digits[:2]}:{digits[2:4] or '00'}"


_PARSERS: dict[CursorType, Callable[[str], CursorValue]] = {
    CursorType.INTEGER: _parse_integer,
    CursorType.DECIMAL: parse_decimal,
    CursorType.DATE: _parse_date,
    CursorType.TIMESTAMP: lambda text: _parse_timestamp(text, aware=False),
    CursorType.TIMESTAMPTZ: lambda text: _parse_timestamp(text, aware=True),
    CursorType.STRING: str,
    CursorType.LSN: lambda text: parse_lsn(text),
    CursorType.BINLOG: lambda text: format_binlog(*parse_binlog(text)),
}


def format_cursor(cursor_type: CursorType, value: CursorValue) -> str:
    """Exact text for a cursor value; `parse_cursor` reads it back to an equal value."""
    if cursor_type is CursorType.LSN:
        assert isinstance(value, int)
        return format_lsn(value)
    if cursor_type is CursorType.DECIMAL:
        assert isinstance(value, Decimal)
        return format(value, "f")
    if cursor_type is CursorType.TIMESTAMP:
        assert isinstance(value, datetime)
        return value.isoformat(timespec="microseconds")
    if cursor_type is CursorType.TIMESTAMPTZ:
        assert isinstance(value, datetime)
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if cursor_type is CursorType.DATE:
        assert isinstance(value, date)
        return value.isoformat()
    return str(value)


_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def format_lsn(lsn: int) -> str:
    """An LSN as PostgreSQL writes it: `16/B374D848`."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """`16/B374D848` as a number; ValueError if it isn't an LSN."""
    found = _LSN.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not an LSN (write it as PostgreSQL does: 16/B374D848)")
    return (int(found[1], 16) << 32) | int(found[2], 16)


_BINLOG = re.compile(r"([^\s:/]+\.[0-9]+):([0-9]+)")


def parse_binlog(text: str) -> tuple[str, int]:
    """`mariadb-bin.000003:1234` as (file, offset); ValueError if it isn't one."""
    found = _BINLOG.fullmatch(text.strip())
    if found is None:
        raise ValueError(
            f"{text!r} is not a binary log position (write it as <file>:<offset>, as SHOW MASTER "
            "STATUS gives them: mariadb-bin.000003:1234)"
        )
    return found[1], int(found[2])


def format_binlog(file: str, offset: int) -> str:
    return f"{file}:{offset}"


def decode_wire(cursor_type: CursorType, wire: str) -> CursorValue:
    """Decode a bound as sources return it: epoch micros, epoch days, or exact text."""
    try:
        if cursor_type is CursorType.TIMESTAMPTZ:
            return EPOCH_UTC + timedelta(microseconds=int(wire))
        if cursor_type is CursorType.TIMESTAMP and _INTEGER.fullmatch(wire):
            return EPOCH_NAIVE + timedelta(microseconds=int(wire))
        if cursor_type is CursorType.DATE:
            return EPOCH_DATE + timedelta(days=int(wire))
    except OverflowError:
        raise CursorError(
            f"the source returned a {cursor_type.value} cursor value outside years 1-9999 "
            "(BC or later than 9999), which this package can't hold exactly; leave such rows out "
            "with a `query:` or use another cursor column."
        ) from None
    return parse_cursor(cursor_type, wire)


@dataclass(frozen=True)
class CursorOrder:
    """How a cursor's values compare, in Python and in Spark. Text is ordered by a collation: a
    database's, which neither reproduces, or the Spark column's (binary, or any other collation
    Spark 4 knows, from a schema or a file's footer), which Spark follows and Python may not. So
    Python compares no two unequal text values, and Spark orders a files source's text as the
    source does, a database's not."""

    cursor_type: CursorType
    database_text: bool  # text a database orders by its collation

    @property
    def known(self) -> bool:
        """Whether Python orders any two values as the source does."""
        # A binary log position is (file, offset), which text order doesn't follow
        return self.cursor_type not in (CursorType.STRING, CursorType.BINLOG)

    @property
    def spark_orders(self) -> bool:
        """Whether Spark orders the values as the source does (the merge's ranking needs it)."""
        return not self.database_text

    def before(self, a: CursorValue, b: CursorValue) -> bool | None:
        """`a < b`; None where only the source can tell (unequal text)."""
        if not self.known:
            return False if a == b else None
        return _less(a, b)

    def later(self, previous: CursorValue | None, upper: CursorValue | None) -> CursorValue | None:
        """The cursor after a run: it never moves backwards, and an empty delta keeps it. Where
        Python can't order the values, the source guarantees `upper >= previous` (the window's
        lower bound is `previous`)."""
        if upper is None:
            return previous
        if previous is None or self.before(upper, previous) is not True:
            return upper
        return previous


def order_of(cursor_type: CursorType, collated: bool) -> CursorOrder:
    """The order of a cursor; `collated`: its source is a database, which orders text by its
    own collation."""
    return CursorOrder(cursor_type, collated and cursor_type is CursorType.STRING)


def _less(a: CursorValue, b: CursorValue) -> bool:
    """`a < b` for two values of one kind (a datetime is not a date here, as in Python)."""
    if isinstance(a, datetime) or isinstance(b, datetime):
        if isinstance(a, datetime) and isinstance(b, datetime):
            return a < b
        raise TypeError(f"a datetime and a date can't be ordered: {a!r}, {b!r}")
    if isinstance(a, date) and isinstance(b, date):
        return a < b
    if isinstance(a, str) and isinstance(b, str):
        return a < b
    if isinstance(a, int | Decimal) and isinstance(b, int | Decimal):
        return a < b
    raise TypeError(f"cursor values of different kinds can't be ordered: {a!r}, {b!r}")


def convert_cursor(
    value: CursorValue, source: CursorType, target: CursorType, timezone: str
) -> CursorValue:
    """A stored cursor of one type as the value of another that reads no less than it did.

    When a column's type changes (`timestamp` to `timestamptz`, `integer` to `numeric`), the
    stored cursor must keep its meaning: a `timestamp` is wall-clock time in the table's
    `timezone`, and where a value has no exact equivalent (a fraction in an integer, a wall-clock
    time in a daylight saving gap) the lower one is taken: reading a little more is safe, less is
    not. Between text and any other type there is no such value: CursorError.
    """
    if source is target:
        return value
    converter = _CONVERSIONS.get((source, target))
    if converter is None:
        raise CursorError(
            f"a {source.value} cursor has no {target.value} equivalent that keeps its order."
        )
    return converter(value, timezone)


def _to_instant(wall: datetime, timezone: str) -> datetime:
    """The earliest instant a wall-clock time can mean in `timezone` (a gap or a repeat: both)."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(timezone)
    return min(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))


def _to_wall(instant: datetime, timezone: str) -> datetime:
    from zoneinfo import ZoneInfo

    return instant.astimezone(ZoneInfo(timezone)).replace(tzinfo=None)


def _wall(value: CursorValue, timezone: str) -> datetime:
    """A date, a timestamp or a timestamptz as wall-clock time in `timezone`."""
    if isinstance(value, datetime):
        return value if value.tzinfo is None else _to_wall(value, timezone)
    assert isinstance(value, date)
    return datetime(value.year, value.month, value.day)


def _to_decimal(value: CursorValue, _: str) -> CursorValue:
    assert isinstance(value, int)
    return Decimal(value)


def _to_integer(value: CursorValue, _: str) -> CursorValue:
    assert isinstance(value, Decimal)
    return int(value.to_integral_value(rounding=ROUND_FLOOR))


def _to_timestamp(value: CursorValue, timezone: str) -> CursorValue:
    return _wall(value, timezone)


def _to_timestamptz(value: CursorValue, timezone: str) -> CursorValue:
    return _to_instant(_wall(value, timezone), timezone)


def _to_date(value: CursorValue, timezone: str) -> CursorValue:
    return _wall(value, timezone).date()


_TEMPORAL = (CursorType.DATE, CursorType.TIMESTAMP, CursorType.TIMESTAMPTZ)
_TO_TEMPORAL = {
    CursorType.DATE: _to_date,
    CursorType.TIMESTAMP: _to_timestamp,
    CursorType.TIMESTAMPTZ: _to_timestamptz,
}
_CONVERSIONS: dict[tuple[CursorType, CursorType], Callable[[CursorValue, str], CursorValue]] = {
    (CursorType.INTEGER, CursorType.DECIMAL): _to_decimal,
    (CursorType.DECIMAL, CursorType.INTEGER): _to_integer,
    **{(a, b): _TO_TEMPORAL[b] for a in _TEMPORAL for b in _TEMPORAL if a is not b},
}
