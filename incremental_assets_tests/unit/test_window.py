from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from incremental_assets.cursor import CursorType
from incremental_assets.window import POSTGRES, SPARK_SQL, Window, lower_bound, render_window

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
    (CursorType.STRING, "it's", None, "\"c\" >= 'it''s'", "`c` >= 'it\\'s'"),
    (CursorType.STRING, "a\\b", None, "\"c\" >= 'a\\b'", "`c` >= 'a\\\\b'"),
]


@pytest.mark.parametrize(("cursor_type", "lower", "upper", "postgres", "spark"), PREDICATES)
def test_window_renders_exact_sql_for_each_engine(
    cursor_type: CursorType, lower: object, upper: object, postgres: str, spark: str
) -> None:
    window = Window("c", cursor_type, lower, upper)  # type: ignore[arg-type]
    assert render_window(window, POSTGRES) == postgres
    assert render_window(window, SPARK_SQL) == spark


def test_an_empty_window_matches_nothing() -> None:
    assert render_window(Window("c", CursorType.INTEGER, 1, None, empty=True), POSTGRES) == "FALSE"


def test_identifiers_are_quoted_safely() -> None:
    window = Window('we"ird', CursorType.INTEGER, 1)
    assert render_window(window, POSTGRES) == '"we""ird" >= 1'
    assert render_window(Window("we`ird", CursorType.INTEGER, 1), SPARK_SQL) == "`we``ird` >= 1L"


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
    assert POSTGRES.wire(CursorType.TIMESTAMP, "x") == "to_char(x, 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
    assert POSTGRES.wire(CursorType.DATE, "x") == "CAST(x - DATE '1970-01-01' AS TEXT)"
    assert POSTGRES.wire(CursorType.DECIMAL, "x") == "CAST(x AS TEXT)"
