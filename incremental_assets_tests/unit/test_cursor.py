from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from incremental_assets.cursor import (
    CursorType,
    convert_cursor,
    cursor_type_from_name,
    decode_wire,
    format_cursor,
    order_of,
    parse_cursor,
)
from incremental_assets.errors import CursorError

ROUND_TRIPS = [
    (CursorType.INTEGER, 9007199254740993, "9007199254740993"),
    (CursorType.INTEGER, -5, "-5"),
    (
        CursorType.DECIMAL,
        Decimal("12345678901234567890.0000000001"),
        "12345678901234567890.0000000001",
    ),
    (CursorType.DECIMAL, Decimal("1.50"), "1.50"),
    (CursorType.DATE, date(1, 1, 1), "0001-01-01"),
    (CursorType.DATE, date(9999, 12, 31), "9999-12-31"),
    (CursorType.TIMESTAMP, datetime(2025, 3, 30, 2, 30, 0, 1), "2025-03-30T02:30:00.000001"),
    (CursorType.TIMESTAMP, datetime(1, 1, 1), "0001-01-01T00:00:00.000000"),
    (
        CursorType.TIMESTAMPTZ,
        datetime(2025, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
        "2025-01-01T00:00:00.999999+00:00",
    ),
    (CursorType.STRING, "ÄÖ it's", "ÄÖ it's"),
]


@pytest.mark.parametrize(("cursor_type", "value", "text"), ROUND_TRIPS)
def test_format_gives_exact_text_and_parse_reads_it_back(
    cursor_type: CursorType, value: object, text: str
) -> None:
    assert format_cursor(cursor_type, value) == text  # type: ignore[arg-type]
    parsed = parse_cursor(cursor_type, text)
    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-01-01T05:30:00+05:30", datetime(2025, 1, 1, tzinfo=UTC)),
        ("2025-01-01 00:00:00Z", datetime(2025, 1, 1, tzinfo=UTC)),
        ("2024-12-31T19:00:00.5-05", datetime(2025, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
        ("2025-01-01", datetime(2025, 1, 1, tzinfo=UTC)),
        ("2025-01-01T00:00:00.123456000", datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_timestamptz_text_is_normalised_to_utc(text: str, expected: datetime) -> None:
    value = parse_cursor(CursorType.TIMESTAMPTZ, text)
    assert value == expected
    assert value.utcoffset() == timedelta(0)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cursor_type", "text", "complaint"),
    [
        (CursorType.INTEGER, "1.5", "whole-number"),
        (CursorType.INTEGER, "1e3", "whole-number"),
        (CursorType.DECIMAL, "NaN", "finite"),
        (CursorType.DECIMAL, "abc", "not a valid decimal"),
        (CursorType.DATE, "2025-13-01", "not a valid date"),
        (CursorType.DATE, "01/02/2025", "YYYY-MM-DD"),
        (CursorType.TIMESTAMP, "2025-01-01T00:00:00+02:00", "can't carry an offset"),
        (CursorType.TIMESTAMPTZ, "2025-01-01T00:00:00.1234567", "microseconds"),
        (CursorType.TIMESTAMPTZ, "yesterday", "ISO 8601"),
        (CursorType.INTEGER, "\u0661\u0662", "whole-number"),  # Arabic-Indic digits
        (CursorType.DECIMAL, "1_000", "decimal digits"),
        (CursorType.DECIMAL, "Infinity", "finite"),
        (CursorType.DATE, "\uff12\uff10\uff12\uff15-01-01", "YYYY-MM-DD"),  # full-width digits
        (CursorType.TIMESTAMP, "\uff12025-01-01T00:00:00", "ISO 8601"),
    ],
)
def test_bad_values_are_refused_with_the_reason(
    cursor_type: CursorType, text: str, complaint: str
) -> None:
    with pytest.raises(CursorError, match=complaint) as raised:
        parse_cursor(cursor_type, text)
    assert repr(text)[1:-1] in str(raised.value)


# What sources send (see cursor.py) and the value it means. Timestamps come from PostgreSQL as
# epoch microseconds (nominal for a timestamp without time zone) and from Spark as text.
WIRE_VALUES = [
    (CursorType.TIMESTAMPTZ, "1735689600000001", datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC)),
    (CursorType.TIMESTAMPTZ, "-62135596800000000", datetime(1, 1, 1, tzinfo=UTC)),
    (
        CursorType.TIMESTAMPTZ,
        "253402300799999999",
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ),
    (CursorType.TIMESTAMP, "1741487400000001", datetime(2025, 3, 9, 2, 30, 0, 1)),  # a DST gap
    (CursorType.TIMESTAMP, "-62135596800000000", datetime(1, 1, 1)),
    (CursorType.TIMESTAMP, "2025-01-01 00:00:00.1", datetime(2025, 1, 1, 0, 0, 0, 100000)),
    (CursorType.DATE, "20089", date(2025, 1, 1)),
    (CursorType.DATE, "-719162", date(1, 1, 1)),
    (CursorType.DATE, "2932896", date(9999, 12, 31)),
    (CursorType.INTEGER, "9223372036854775807", 2**63 - 1),
    (CursorType.INTEGER, "9007199254740993", 2**53 + 1),
    (
        CursorType.DECIMAL,
        "12345678901234567890.0000000001",
        Decimal("12345678901234567890.0000000001"),
    ),
    (CursorType.STRING, "ÄÖ it's", "ÄÖ it's"),
]


@pytest.mark.parametrize(("cursor_type", "wire", "value"), WIRE_VALUES)
def test_wire_form_decodes_to_the_exact_value(
    cursor_type: CursorType, wire: str, value: object
) -> None:
    decoded = decode_wire(cursor_type, wire)
    assert decoded == value
    assert format_cursor(cursor_type, decoded) == format_cursor(cursor_type, value)  # type: ignore[arg-type]


def test_decimal_scale_survives_the_wire() -> None:
    assert format_cursor(CursorType.DECIMAL, decode_wire(CursorType.DECIMAL, "1.50")) == "1.50"


@pytest.mark.parametrize(
    ("cursor_type", "wire"),
    [
        (CursorType.TIMESTAMPTZ, str(10**18)),
        (CursorType.TIMESTAMPTZ, "-62135596800000001"),
        (CursorType.TIMESTAMP, "-63517788000000000"),  # 44 BC, as PostgreSQL sends it
        (CursorType.DATE, "-719163"),  # 31 December 1 BC
        (CursorType.DATE, "2932897"),  # 1 January 10000
    ],
)
def test_wire_values_outside_python_years_are_a_clear_error(
    cursor_type: CursorType, wire: str
) -> None:
    with pytest.raises(CursorError, match="outside years 1-9999"):
        decode_wire(cursor_type, wire)


@pytest.mark.parametrize(
    ("cursor_type", "collated", "previous", "upper", "expected"),
    [
        (CursorType.INTEGER, True, None, 5, 5),
        (CursorType.INTEGER, True, 7, None, 7),
        (CursorType.INTEGER, True, 7, 5, 7),  # never backwards: a lookback read only older rows
        (CursorType.INTEGER, False, 7, 9, 9),
        (CursorType.DATE, True, date(2025, 1, 2), date(2025, 1, 1), date(2025, 1, 2)),
        (CursorType.STRING, True, "b", "a", "a"),  # the database's collation decided "a" >= "b"
        (CursorType.STRING, False, "b", "a", "a"),  # a files column's collation decided so too
    ],
)
def test_the_cursor_only_moves_forward(
    cursor_type: CursorType, collated: bool, previous: object, upper: object, expected: object
) -> None:
    order = order_of(cursor_type, collated)
    assert order.later(previous, upper) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cursor_type", "collated", "a", "b", "before"),
    [
        (CursorType.STRING, True, "a", "a", False),
        (CursorType.STRING, True, "a", "b", None),  # only the database can tell
        (CursorType.STRING, False, "Z", "a", None),  # a Spark column may be UTF8_LCASE
        (CursorType.STRING, False, "a", "a", False),
        (CursorType.DECIMAL, True, Decimal("1.5"), 2, True),  # a collation orders only text
        (
            CursorType.TIMESTAMPTZ,
            True,
            datetime(2025, 1, 2, tzinfo=UTC),
            datetime(2025, 1, 1, tzinfo=UTC),
            False,
        ),
    ],
)
def test_python_orders_no_unequal_text_and_spark_orders_all_but_a_databases(
    cursor_type: CursorType, collated: bool, a: object, b: object, before: bool | None
) -> None:
    order = order_of(cursor_type, collated)
    assert order.known is (cursor_type is not CursorType.STRING)
    assert order.spark_orders is not (collated and cursor_type is CursorType.STRING)
    assert order.before(a, b) is before  # type: ignore[arg-type]


def test_values_of_different_kinds_are_refused_not_ordered() -> None:
    with pytest.raises(TypeError, match="a datetime and a date"):
        order_of(CursorType.DATE, False).before(date(2025, 1, 1), datetime(2025, 1, 1))
    with pytest.raises(TypeError, match="different kinds"):
        order_of(CursorType.INTEGER, False).before("1", 1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bigint", CursorType.INTEGER),
        ("NUMERIC", CursorType.DECIMAL),
        ("timestamp_ntz", CursorType.TIMESTAMP),
        ("timestamptz", CursorType.TIMESTAMPTZ),
        ("text", CursorType.STRING),
        ("date", CursorType.DATE),
    ],
)
def test_type_names_and_aliases(name: str, expected: CursorType) -> None:
    assert cursor_type_from_name(name) is expected


def test_unknown_type_names_list_the_allowed_ones() -> None:
    with pytest.raises(
        CursorError, match="use one of integer, decimal, date, timestamp, timestamptz, string"
    ):
        cursor_type_from_name("float")


T, TZ, D = CursorType.TIMESTAMP, CursorType.TIMESTAMPTZ, CursorType.DATE
CONVERSIONS = [
    (CursorType.INTEGER, CursorType.DECIMAL, 7, Decimal(7)),
    (CursorType.DECIMAL, CursorType.INTEGER, Decimal("7.9"), 7),
    (CursorType.DECIMAL, CursorType.INTEGER, Decimal("-7.1"), -8),  # floor: read a little more
    (
        T,
        TZ,
        datetime(2025, 1, 15, 11, 0),
        datetime(2025, 1, 15, 10, 0, tzinfo=UTC),
    ),  # Paris, winter
    (TZ, T, datetime(2025, 7, 15, 10, 0, tzinfo=UTC), datetime(2025, 7, 15, 12, 0)),  # summer
    # 02:30 on 2025-03-30 doesn't exist in Paris: the earlier of the two readings, 00:30 UTC.
    (T, TZ, datetime(2025, 3, 30, 2, 30), datetime(2025, 3, 30, 0, 30, tzinfo=UTC)),
    # 02:30 on 2025-10-26 happens twice in Paris: the first time, 00:30 UTC.
    (T, TZ, datetime(2025, 10, 26, 2, 30), datetime(2025, 10, 26, 0, 30, tzinfo=UTC)),
    (D, T, date(2025, 1, 15), datetime(2025, 1, 15)),
    (D, TZ, date(2025, 1, 15), datetime(2025, 1, 14, 23, 0, tzinfo=UTC)),
    (T, D, datetime(2025, 1, 15, 23, 59), date(2025, 1, 15)),
    (TZ, D, datetime(2025, 1, 15, 23, 30, tzinfo=UTC), date(2025, 1, 16)),  # already the 16th
]


@pytest.mark.parametrize(("source", "target", "value", "expected"), CONVERSIONS)
def test_a_cursor_keeps_its_meaning_when_its_columns_type_changes(
    source: CursorType, target: CursorType, value: object, expected: object
) -> None:
    assert convert_cursor(value, source, target, "Europe/Paris") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (CursorType.STRING, CursorType.INTEGER),
        (CursorType.INTEGER, CursorType.STRING),
        (D, CursorType.INTEGER),
    ],
)
def test_a_cursor_without_an_equivalent_in_the_new_type_is_refused(
    source: CursorType, target: CursorType
) -> None:
    value = parse_cursor(source, "2025-01-01" if source is D else "5")
    with pytest.raises(
        CursorError, match=f"a {source.value} cursor has no {target.value} equivalent"
    ):
        convert_cursor(value, source, target, "UTC")
