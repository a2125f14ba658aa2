"""Neither the JVM's, the Spark session's nor the database session's time zone may shift a value.

Each case moves all three away from UTC (to zones with daylight saving time and odd offsets) and
loads values that sit in DST gaps and overlaps, at microsecond precision, in early years, alone
and in arrays. The database session's zone is set by `sessionInitStatement`: pgjdbc sends the
JVM's zone when it connects, which would override a `-c TimeZone=` in `options`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by

# (JVM default zone, Spark session zone, database session zone)
ZONES = [
    ("America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"),
    ("Europe/Paris", "America/St_Johns", "Asia/Kathmandu"),
]
ROWS = [
    (
        1,
        "2025-03-09 02:30:00.000001",
        "2025-03-09 07:30:00.000001+00",
        "2025-03-09",
    ),  # New York's gap
    (
        2,
        "2025-11-02 01:30:00.5",
        "2025-11-02 05:30:00.5+00",
        "2025-11-02",
    ),  # New York's repeated hour
    (3, "2025-03-30 02:30:00.25", "2025-03-30 01:30:00.25+00", "2025-03-30"),  # Paris's gap
    (4, "1900-01-01 00:00:00", "1900-01-01 00:00:00+00", "1900-01-01"),  # local mean time offsets
    (5, "0001-01-01 00:00:00.000001", "0001-01-01 00:00:00.000001+00", "0001-01-01"),
]


@pytest.fixture(params=ZONES, ids=lambda zones: "/".join(zones))
def zones(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[tuple[str, str, str]]:
    jvm, session, _ = request.param
    time_zone = spark._jvm.java.util.TimeZone  # type: ignore[union-attr]
    saved_jvm = time_zone.getDefault()
    saved_session = spark.conf.get("spark.sql.session.timeZone")
    assert saved_session is not None
    time_zone.setDefault(time_zone.getTimeZone(jvm))
    spark.conf.set("spark.sql.session.timeZone", session)
    try:
        yield request.param
    finally:
        time_zone.setDefault(saved_jvm)
        spark.conf.set("spark.sql.session.timeZone", saved_session)


def _load(loads: Loads, pg: Schema, database_zone: str, cursor: str) -> None:
    loads.configure(
        pg,
        "moments",
        source={"properties": {"sessionInitStatement": f"SET TimeZone = '{database_zone}'"}},
        # What the read's own session reports as its zone comes along as a column.
        query=f"SELECT m.*, current_setting('TimeZone') AS db_zone FROM {pg.name}.moments m",
        mode="merge",
        cursor=cursor,
        primary_key=["id"],
        transaction_cap=False,
    )


@pytest.mark.parametrize("cursor", ["ts", "tstz", "d"])
def test_values_and_cursors_are_exact_whatever_the_zones(
    loads: Loads,
    pg: Schema,
    zones: tuple[str, str, str],
    cursor: str,
) -> None:
    pg.execute(
        "CREATE TABLE moments (id int PRIMARY KEY, ts timestamp, tstz timestamptz, d date, "
        "ts_a timestamp[], tstz_a timestamptz[], d_a date[])"
    )
    for row in ROWS:
        pg.execute(
            "INSERT INTO moments VALUES (%s, %s, %s, %s, ARRAY[%s, NULL, %s]::timestamp[], "
            "ARRAY[%s, %s]::timestamptz[], ARRAY[NULL, %s]::date[])",
            params=(*row, row[1], ROWS[0][1], row[2], ROWS[1][2], row[3]),
        )
    _load(loads, pg, zones[2], cursor)

    run = loads.run()

    assert run.success, run.failure
    columns = ["id", "ts", "tstz", "d", "ts_a", "tstz_a", "d_a"]
    with pg.server.connect() as conn:
        conn.execute("SET TimeZone = 'UTC'")
        source = sorted(
            conn.execute(f"SELECT {', '.join(columns)} FROM {pg.name}.moments").fetchall()
        )
    lake = loads.lake()
    assert rows_by(lake, columns) == source
    assert set(lake["db_zone"].to_pylist()) == {zones[2]} and zones[2] != zones[0]
    expected = {
        "ts": "2025-11-02T01:30:00.500000",
        "tstz": "2025-11-02T05:30:00.500000+00:00",
        "d": "2025-11-02",
    }
    assert run.metadata["cursor"] == expected[cursor]


@pytest.mark.parametrize("timezone", ["America/New_York", "UTC"])
def test_a_wall_clock_cursor_reads_the_repeated_hour_again_when_dst_ends(
    loads: Loads,
    pg: Schema,
    timezone: str,
) -> None:
    pg.execute("CREATE TABLE moments (id int PRIMARY KEY, ts timestamp NOT NULL)")
    pg.execute(
        "INSERT INTO moments VALUES (1, '2025-11-02 01:10:00'), (2, '2025-11-02 01:40:00')"
    )  # first pass
    loads.configure(
        pg,
        "moments",
        mode="append",
        cursor="ts",
        primary_key=["id"],
        timezone=timezone,
        transaction_cap=False,
    )
    assert loads.run().success
    # An hour later by the clock, the wall clock reads 01:20 again.
    pg.execute("INSERT INTO moments VALUES (3, '2025-11-02 01:20:00'), (4, '2025-11-02 02:05:00')")

    run = loads.run()

    assert run.success, run.failure
    ids = [r[0] for r in loads.rows(["id"])]
    if timezone == "UTC":
        assert ids == [1, 2, 4]  # the control: a zone without DST can't know the hour repeats
    else:
        assert ids == [1, 2, 3, 4]
        assert "repeats when daylight saving time ends" in run.metadata["warnings"]
        assert run.metadata["extract_filter"].startswith(
            "\"ts\" >= TIMESTAMP '2025-11-02 01:00:00.000000'"
        )
