from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from incremental_assets.cursor import CursorType
from incremental_assets.dialects import POSTGRES, SPARK_SQL, local_clock
from incremental_assets.window import Window, lower_bound, render_window, repeated_hour_start

TS = datetime(2025, 1, 2, 3, 4, 5, 6)
TSZ = datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)

# (cursor type, lower, upper, PostgreSQL text, Spark SQL text)
PREDICATES = [
    (CursorType.INTEGER, 10, 20, '"c" >= 10 AND "c" <= 20', "`c` >= 10L AND `c` <= 20L"),
    (CursorType.INTEGER, None, 20, '"c" <= 20', "`c` <= 20L"),
    (CursorType.INTEGER, 10, None, '"c" >= 10', "`c` >= 10L"),
    (CursorType.INTEGER, None, None, "TRUE", "TRUE"),
    (
        CursorType.DECIMAL,
        Decimal("1.50"),
        Decimal("2"),
        '"c" >= 1.50 AND "c" <= 2',
        "`c` >= 1.50BD AND `c` <= 2BD",
    ),
    (
        CursorType.DATE,
        date(2025, 1, 1),
        None,
        "\"c\" >= DATE '2025-01-01'",
        "`c` >= DATE '2025-01-01'",
    ),
    (
        CursorType.TIMESTAMP,
        TS,
        None,
        "\"c\" >= TIMESTAMP '2025-01-02 03:04:05.000006'",
        "`c` >= TIMESTAMP_NTZ '2025-01-02 03:04:05.000006'",
    ),
    (
        CursorType.TIMESTAMPTZ,
        None,
        TSZ,
        "\"c\" <= TIMESTAMPTZ '2025-01-02 03:04:05.000006+00:00'",
        "`c` <= TIMESTAMP_LTZ '2025-01-02 03:04:05.000006+00:00'",
    ),
    (CursorType.STRING, "it's", None, "\"c\" >= E'it''s'", "`c` >= 'it\\'s'"),
    (CursorType.STRING, "a\\b", None, "\"c\" >= E'a\\\\b'", "`c` >= 'a\\\\b'"),
]


@pytest.mark.parametrize(("cursor_type", "lower", "upper", "postgres", "spark"), PREDICATES)
def test_window_renders_exact_sql_for_each_engine(
    cursor_type: CursorType, lower: object, upper: object, postgres: str, spark: str
) -> None:
    window = Window("c", cursor_type, lower, upper)  # type: ignore[arg-type]
    assert render_window(window, POSTGRES) == postgres
    assert render_window(window, SPARK_SQL) == spark


# Every combination of bounds and flags: (lower, upper, upper open, include_nulls, empty,
# PostgreSQL text, Spark SQL text). An open upper edge is what bounded backfills use.
COMBINATIONS = [
    (None, None, False, False, False, "TRUE", "TRUE"),
    (None, None, True, False, False, "TRUE", "TRUE"),
    (None, None, False, True, False, "TRUE", "TRUE"),
    (None, None, False, False, True, "FALSE", "FALSE"),
    (None, None, False, True, True, '"c" IS NULL', "`c` IS NULL"),
    (10, None, False, False, False, '"c" >= 10', "`c` >= 10L"),
    (10, None, True, False, False, '"c" >= 10', "`c` >= 10L"),
    (10, None, False, True, False, '("c" >= 10) OR "c" IS NULL', "(`c` >= 10L) OR `c` IS NULL"),
    (10, None, False, False, True, "FALSE", "FALSE"),
    (10, None, False, True, True, '"c" IS NULL', "`c` IS NULL"),
    (None, 20, False, False, False, '"c" <= 20', "`c` <= 20L"),
    (None, 20, True, False, False, '"c" < 20', "`c` < 20L"),
    (None, 20, False, True, False, '("c" <= 20) OR "c" IS NULL', "(`c` <= 20L) OR `c` IS NULL"),
    (None, 20, True, True, False, '("c" < 20) OR "c" IS NULL', "(`c` < 20L) OR `c` IS NULL"),
    (None, 20, False, False, True, "FALSE", "FALSE"),
    (None, 20, True, True, True, '"c" IS NULL', "`c` IS NULL"),
    (10, 20, False, False, False, '"c" >= 10 AND "c" <= 20', "`c` >= 10L AND `c` <= 20L"),
    (10, 20, True, False, False, '"c" >= 10 AND "c" < 20', "`c` >= 10L AND `c` < 20L"),
    (
        10,
        20,
        False,
        True,
        False,
        '("c" >= 10 AND "c" <= 20) OR "c" IS NULL',
        "(`c` >= 10L AND `c` <= 20L) OR `c` IS NULL",
    ),
    (
        10,
        20,
        True,
        True,
        False,
        '("c" >= 10 AND "c" < 20) OR "c" IS NULL',
        "(`c` >= 10L AND `c` < 20L) OR `c` IS NULL",
    ),
    (10, 20, False, False, True, "FALSE", "FALSE"),
    (10, 20, True, False, True, "FALSE", "FALSE"),
    (10, 20, False, True, True, '"c" IS NULL', "`c` IS NULL"),
    (10, 10, False, False, False, '"c" >= 10 AND "c" <= 10', "`c` >= 10L AND `c` <= 10L"),
]


@pytest.mark.parametrize(
    ("lower", "upper", "upper_open", "include_nulls", "empty", "postgres", "spark"),
    COMBINATIONS,
)
def test_every_combination_of_bounds_renders_exact_sql(
    lower: int | None,
    upper: int | None,
    upper_open: bool,
    include_nulls: bool,
    empty: bool,
    postgres: str,
    spark: str,
) -> None:
    window = Window(
        "c",
        CursorType.INTEGER,
        lower,
        upper,
        empty=empty,
        include_nulls=include_nulls,
        upper_edge="open" if upper_open else "closed",
    )
    assert render_window(window, POSTGRES) == postgres
    assert render_window(window, SPARK_SQL) == spark


def test_identifiers_are_quoted_safely() -> None:
    window = Window('we"ird', CursorType.INTEGER, 1)
    assert render_window(window, POSTGRES) == '"we""ird" >= 1'
    assert render_window(Window("we`ird", CursorType.INTEGER, 1), SPARK_SQL) == "`we``ird` >= 1L"


@pytest.mark.parametrize(
    ("cursor_type", "previous", "lookback"),
    [
        (CursorType.TIMESTAMP, datetime(1, 1, 1, 0, 3), timedelta(minutes=5)),
        (CursorType.TIMESTAMPTZ, datetime(1, 1, 1, tzinfo=UTC), timedelta(microseconds=1)),
        (CursorType.DATE, date(1, 1, 2), timedelta(days=3)),
    ],
)
def test_a_lookback_below_year_1_reads_without_a_lower_bound(
    cursor_type: CursorType, previous: date, lookback: timedelta
) -> None:
    assert lower_bound(cursor_type, previous, None, lookback) is None


@pytest.mark.parametrize(
    ("cursor_type", "previous", "start", "lookback", "expected"),
    [
        (CursorType.INTEGER, None, None, None, None),
        (CursorType.INTEGER, None, 5, 3, 5),  # first run: start, no lookback
        (CursorType.INTEGER, 100, 5, None, 100),  # inclusive: ties with the cursor are read again
        (CursorType.INTEGER, 100, None, 30, 70),
        (CursorType.DECIMAL, Decimal("1.5"), None, 1, Decimal("0.5")),
        (CursorType.DECIMAL, Decimal("1.50"), None, Decimal("0.25"), Decimal("1.25")),
        (
            CursorType.DECIMAL,
            Decimal("12345678901234567890.0000000001"),
            None,
            1,
            Decimal("12345678901234567889.0000000001"),
        ),
        (  # 30 digits: rounding to 28 would move the bound *up*, past rows tied with the cursor
            CursorType.DECIMAL,
            Decimal("99999999999999999999.9999999999"),
            None,
            0,
            Decimal("99999999999999999999.9999999999"),
        ),
        (
            CursorType.DECIMAL,
            Decimal("1E+40"),
            None,
            Decimal("1E-40"),
            Decimal("9" * 40 + "." + "9" * 40),
        ),
        (CursorType.DATE, date(2025, 1, 10), None, timedelta(hours=36), date(2025, 1, 8)),
        (CursorType.TIMESTAMP, TS, None, timedelta(minutes=5), TS - timedelta(minutes=5)),
        (
            CursorType.TIMESTAMPTZ,
            TSZ,
            None,
            timedelta(microseconds=1),
            TSZ - timedelta(microseconds=1),
        ),
        (CursorType.STRING, "m", None, None, "m"),
    ],
)
def test_lower_bound_is_previous_cursor_minus_lookback(
    cursor_type: CursorType, previous: object, start: object, lookback: object, expected: object
) -> None:
    assert lower_bound(cursor_type, previous, start, lookback) == expected  # type: ignore[arg-type]


def test_postgres_safety_lag_uses_the_server_clock() -> None:
    assert POSTGRES.now_plus(CursorType.TIMESTAMPTZ, -timedelta(seconds=30), "UTC") == (
        "(now() + INTERVAL '-30000000 microseconds')"
    )
    assert POSTGRES.now_plus(CursorType.TIMESTAMP, timedelta(minutes=1), "Europe/Paris") == (
        "((now() + INTERVAL '60000000 microseconds') AT TIME ZONE 'Europe/Paris')"
    )
    assert POSTGRES.now_plus(CursorType.DATE, timedelta(0), "UTC") == (
        "CAST((now() + INTERVAL '0 microseconds') AT TIME ZONE 'UTC' AS DATE)"
    )


def test_postgres_wire_forms_do_not_depend_on_the_session_time_zone() -> None:
    assert (
        POSTGRES.wire(CursorType.TIMESTAMPTZ, "x")
        == "CAST(CAST(EXTRACT(EPOCH FROM x) * 1000000 AS BIGINT) AS TEXT)"
    )
    assert (  # nominal for a timestamp without time zone; to_char would lose BC and 'infinity'
        POSTGRES.wire(CursorType.TIMESTAMP, "x")
        == "CAST(CAST(EXTRACT(EPOCH FROM x) * 1000000 AS BIGINT) AS TEXT)"
    )
    assert POSTGRES.wire(CursorType.DATE, "x") == "CAST(x - DATE '1970-01-01' AS TEXT)"
    assert POSTGRES.wire(CursorType.DECIMAL, "x") == "CAST(x AS TEXT)"


@pytest.mark.parametrize(
    ("zone", "value", "expected"),
    [
        ("Europe/Paris", datetime(2025, 10, 26, 2, 30), datetime(2025, 10, 26, 2, 0)),
        ("Europe/Paris", datetime(2025, 10, 26, 2, 0), datetime(2025, 10, 26, 2, 0)),
        ("Europe/Paris", datetime(2025, 10, 26, 2, 59, 59, 999999), datetime(2025, 10, 26, 2, 0)),
        ("Europe/Paris", datetime(2025, 10, 26, 1, 59, 59, 999999), None),
        ("Europe/Paris", datetime(2025, 10, 26, 3, 0), None),
        ("Europe/Paris", datetime(2025, 3, 30, 2, 30), None),  # a gap: skipped, not repeated
        ("America/New_York", datetime(2025, 11, 2, 1, 0, 0, 1), datetime(2025, 11, 2, 1, 0)),
        ("America/New_York", datetime(2025, 3, 9, 2, 15), None),
        ("Australia/Lord_Howe", datetime(2025, 4, 6, 1, 45), datetime(2025, 4, 6, 1, 30)),
        ("UTC", datetime(2025, 10, 26, 2, 30), None),
        ("Europe/Paris", datetime(1, 1, 1), None),
        ("Europe/Paris", datetime(9999, 12, 31, 23, 59, 59, 999999), None),
    ],
)
def test_the_repeated_hour_is_found_to_the_microsecond(
    zone: str, value: datetime, expected: datetime | None
) -> None:
    assert repeated_hour_start(value, zone) == expected


# 01:30 UTC on 2025-03-30 is 03:30 in Paris, just after clocks skipped from 02:00 to 03:00.
SPRING_FORWARD = datetime(2025, 3, 30, 1, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cursor_type", "expected"),
    [
        (CursorType.TIMESTAMPTZ, datetime(2025, 3, 29, 23, 30, tzinfo=UTC)),
        (CursorType.TIMESTAMP, datetime(2025, 3, 30, 0, 30)),
        (CursorType.DATE, date(2025, 3, 30)),
    ],
)
def test_the_local_clock_moves_by_elapsed_time_across_a_dst_change(
    cursor_type: CursorType, expected: object
) -> None:
    moved = local_clock(cursor_type, -timedelta(hours=2), "Europe/Paris", now=SPRING_FORWARD)
    assert moved == expected
