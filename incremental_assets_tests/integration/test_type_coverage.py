"""PostgreSQL types: each extracts exactly, or the run fails saying which column and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema

TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
    id int PRIMARY KEY,
    u uuid, j jsonb, ints int[], words text[], m mood, n numeric, b bytea, f boolean,
    early timestamptz, late timestamptz, early_local timestamp, old_day date,
    wide numeric(50,10), deep numeric(50,45),
    numbers numeric[], locals timestamp[], instants timestamptz[], days date[]
)
"""
ROW = (
    "1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2.5, \"x\"]}', '{1,2,NULL}', "
    "'{a,\"b c\"}', 'happy', "
    "12345678901234567890.123456789012345678, '\\x00ff10', true, '0001-01-01 00:00:00.000001+00', "
    "'9999-12-31 23:59:59.999999+00', '1000-06-15 12:00:00', '4713-01-01 BC', "
    "12345678901234567890123456789012345678, 0.123456789012345678901234567890123, "
    "'{12345678901234567890.123456789012345678,NULL,-0.5}', "
    '\'{"2025-03-09 02:30:00.000001",NULL,"1000-06-15 12:00:00"}\', '
    '\'{"0001-01-01 00:00:00.000001+00","9999-12-31 23:59:59.999999+00"}\', '
    "'{\"4713-01-01 BC\",2025-01-01,NULL}'"
)


DEFAULTS = {**ITEMS_MERGE, "cursor": "id"}


def test_every_type_arrives_exactly(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
) -> None:
    """On both lake formats: Iceberg stores every type the plain format does, arrays included."""
    pg.execute(*TYPES.strip().split(";\n"))
    pg.execute(f"INSERT INTO items VALUES ({ROW})")
    loads.configure(pg, DEFAULTS)

    run = loads.run()

    assert run.success, run.failure
    lake = loads.lake()
    row = lake.drop_columns(["old_day", "days"]).to_pylist()[0]
    assert row["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert json.loads(row["j"]) == {"k": [1, 2.5, "x"]}
    assert row["ints"] == [1, 2, None] and row["words"] == ["a", "b c"]
    assert row["m"] == "happy"
    assert row["n"] == Decimal("12345678901234567890.123456789012345678")
    assert row["b"] == b"\x00\xff\x10" and row["f"] is True
    assert row["early"] == datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert row["late"] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert row["early_local"] == datetime(1000, 6, 15, 12)
    # Above 38 digits Spark keeps the integer digits: numeric(50,10) is decimal(38,0) in the lake.
    assert row["wide"] == Decimal("12345678901234567890123456789012345678")
    assert row["deep"] == Decimal("0.123456789012345678901234567890123")
    assert row["numbers"] == [
        Decimal("12345678901234567890.123456789012345678"),
        None,
        Decimal("-0.5"),
    ]
    assert row["locals"] == [datetime(2025, 3, 9, 2, 30, 0, 1), None, datetime(1000, 6, 15, 12)]
    assert row["instants"] == [
        datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
    # 4713 BC (year -4712, proleptic Gregorian in both PostgreSQL and Parquet), as days since 1970.
    assert lake["old_day"].cast(pa.int32()).to_pylist() == [
        pg.query("SELECT old_day - DATE '1970-01-01' FROM items")[0][0]
    ]
    assert lake["days"].cast(pa.list_(pa.int32())).to_pylist() == [
        [pg.query("SELECT DATE '4713-01-01 BC' - DATE '1970-01-01'")[0][0], 20089, None]
    ]


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (
            "n",
            "0.1234567890123456789012",
            "column 'n' of table 'items' holds 0.1234567890123456789012, "
            "which decimal(38,18) can't hold exactly",
        ),
        (
            "wide",
            "1.5",
            "column 'wide' of table 'items' holds 1.5000000000, "
            "which decimal(38,0) can't hold exactly",
        ),
        (
            "deep",
            "0.1234567890123456789012345678901234",
            "column 'deep' of table 'items' holds "
            "0.123456789012345678901234567890123400000000000, which decimal(38,33)",
        ),
        (
            "numbers",
            "'{1,1.23456789012345678901234}'",
            "column 'numbers' of table 'items' holds 1.23456789012345678901234, "
            "which decimal(38,18)",
        ),
        (
            "numbers",
            "'{123456789012345678901234567890}'",
            "column 'numbers' of table 'items' holds 123456789012345678901234567890, "
            "which decimal(38,18)",
        ),
        ("early", "'infinity'", "holds a value Spark can't store (PostgreSQL 'infinity'"),
        ("early_local", "'-infinity'", "holds a value Spark can't store (PostgreSQL 'infinity'"),
        ("instants", "'{2025-01-01,infinity}'", "column instants holds infinity"),
        ("days", "'{-infinity}'", "holds a value Spark can't store (PostgreSQL 'infinity'"),
        ("locals", "'{{2025-01-01,2025-01-02}}'", "column locals holds a 2-dimensional array"),
        ("numbers", "'{{1},{2}}'", "cast it in `query:` (CAST(c AS text))"),
    ],
)
def test_values_the_lake_cannot_hold_fail_clearly_and_write_nothing(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
    column: str,
    value: str,
    message: str,
) -> None:
    pg.execute(*TYPES.strip().split(";\n"))
    pg.execute(f"INSERT INTO items (id, {column}) VALUES (1, {value})")
    loads.configure(pg, DEFAULTS)

    run = loads.run()

    assert not run.success
    assert "Table 'items'" in (run.failure or "")
    assert message in (run.failure or "")
    assert loads.files() == []


def test_an_array_declared_with_two_dimensions_is_refused_before_reading(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, grid timestamptz[][])")
    pg.execute("INSERT INTO items VALUES (1, '{{2025-01-01}}')")
    loads.configure(pg, DEFAULTS)

    run = loads.run()

    assert not run.success
    assert (
        "Table 'items': column 'grid' is a 2-dimensional array of timestamp, which can't be read "
        "exactly. Fix: cast it in `query:` (CAST(grid AS text))" in (run.failure or "")
    )
    assert loads.files() == []


def test_a_time_of_day_arrives_on_1970_01_01_and_a_timetz_in_utc(
    loads: Loads, pg: Schema, lake_format: LakeFormat
) -> None:
    """On both lake formats."""
    pg.execute(
        "CREATE TABLE items (id int PRIMARY KEY, t time, tz timetz, tzs timetz[])",
        "INSERT INTO items VALUES (1, '23:59:59.999999', '12:34:56.789+02', "
        "'{00:15:00-05:30,NULL}'), (2, NULL, NULL, NULL)",
    )
    loads.configure(pg, DEFAULTS)

    run = loads.run()

    assert run.success, run.failure
    rows = sorted(loads.lake().to_pylist(), key=lambda row: int(row["id"]))
    assert [(r["t"], r["tz"], r["tzs"]) for r in rows] == [
        (
            datetime(1970, 1, 1, 23, 59, 59, 999999),
            datetime(1970, 1, 1, 10, 34, 56, 789000, tzinfo=UTC),
            [datetime(1970, 1, 1, 5, 45, tzinfo=UTC), None],
        ),
        (None, None, None),
    ]
