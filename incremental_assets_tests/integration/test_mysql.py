"""What only a MySQL or MariaDB source has: its types, its time zones, its collations, its catalog.

The server runs in Asia/Kolkata (UTC+05:30) and the tests move the JVM's and the Spark session's
zones away from UTC as well, so a value shifted by any of them shows. What a MySQL source shares
with PostgreSQL (modes, caps, deletes, ties, sensors) is tested by the `db`-parametrized tests.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from incremental_assets_tests.support.cli import cli_env, run_cli
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.mariadb import Database, MariaDbServer
from incremental_assets_tests.support.postgres import PostgresServer, Schema
from incremental_assets_tests.support.project import ProjectBuilder, Run, read_lake, rows_by

BIGINT_UNSIGNED_MAX = 2**64 - 1
EVERY_TYPE = """
CREATE TABLE things (
    id BIGINT UNSIGNED PRIMARY KEY,
    flag TINYINT(1),
    small_u SMALLINT UNSIGNED,
    int_u INT UNSIGNED,
    wide DECIMAL(65, 30),
    money DECIMAL(12, 2),
    wall DATETIME(6),
    moment TIMESTAMP(6) NULL,
    day DATE,
    doc JSON,
    state ENUM('new', 'paid', 'Shipped'),
    tags SET('a', 'b', 'c'),
    bits BIT(10),
    raw BLOB,
    body TEXT,
    elapsed TIME(6),
    yr YEAR,
    code CHAR(5),
    at INT NOT NULL,
    f FLOAT,
    d DOUBLE,
    ti TINYINT,
    si SMALLINT,
    mi MEDIUMINT,
    mi_u MEDIUMINT UNSIGNED,
    vb VARBINARY(8)
)
"""
# Written in the server's session zone pinned to UTC by the test's connection.
ROWS = [
    (
        BIGINT_UNSIGNED_MAX,
        1,
        65535,
        4294967295,
        "12345678901234567890123456789012345.125",
        "-9999999999.99",
        "2025-03-09 02:30:00.000001",
        "2025-11-02 05:30:00.500000",
        "2025-03-30",
        '{"k": [1, 2.5, "x"]}',
        "Shipped",
        "a,c",
        0b1000000001,
        b"\x00\xff\x10",
        "line one\nline \\two 'quoted' ünïcode",
        "-838:59:59.000001",
        2155,
        "ab",
        1,
        1.5,
        2.25,
        -128,
        -32768,
        -8388608,
        16777215,
        b"\x01",
    ),
    (
        2**63,
        0,
        0,
        0,
        "0.5",
        "0.01",
        "1000-01-01 00:00:00",
        "1970-01-01 00:00:01",
        "1000-01-01",
        "null",
        "new",
        "",
        0,
        b"",
        "",
        "00:00:00",
        1901,
        "",
        2,
        *[0] * 6,
        b"",
    ),
    (
        1,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        3,
        *[None] * 7,
    ),
]


@pytest.fixture
def shifted_zones(spark: SparkSession) -> Iterator[None]:
    """The JVM in New York and the Spark session in Kathmandu for the test's length."""
    time_zone = spark._jvm.java.util.TimeZone  # type: ignore[union-attr]
    saved_jvm, saved_session = time_zone.getDefault(), spark.conf.get("spark.sql.session.timeZone")
    assert saved_session is not None
    time_zone.setDefault(time_zone.getTimeZone("America/New_York"))
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kathmandu")
    try:
        yield
    finally:
        time_zone.setDefault(saved_jvm)
        spark.conf.set("spark.sql.session.timeZone", saved_session)


def _insert(my: Database, table: str, rows: list[tuple[Any, ...]]) -> None:
    marks = ", ".join(["%s"] * len(rows[0]))
    with my.server.connect(my.name) as conn, conn.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
        cursor.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)


def _load(loads: Loads, my: Database, **options: Any) -> Run:
    loads.configure(my, "things", **options)
    return loads.run()


def _lake(tmp_path: Path, columns: list[str], table: str = "things") -> list[tuple[Any, ...]]:
    return rows_by(read_lake(tmp_path / "lake", table), columns)


LAKE_TYPES = {
    "id": pa.decimal128(20, 0),  # BIGINT UNSIGNED: up to 2^64 - 1, no wraparound
    "flag": pa.int8(),  # TINYINT(1) stays a number
    "small_u": pa.int32(),
    "int_u": pa.int64(),
    "wide": pa.decimal128(38, 3),  # 35 integer digits kept, the scale cut to fit 38
    "money": pa.decimal128(12, 2),
    "wall": pa.timestamp("us"),  # DATETIME: a wall clock
    "moment": pa.timestamp("us", tz="UTC"),  # TIMESTAMP: an instant
    "day": pa.date32(),
    "doc": pa.string(),
    "state": pa.string(),
    "tags": pa.string(),
    "bits": pa.int64(),
    "raw": pa.binary(),
    "body": pa.string(),
    "elapsed": pa.string(),
    "yr": pa.int32(),
    "code": pa.string(),
    "at": pa.int32(),
    "f": pa.float32(),
    "d": pa.float64(),
    "ti": pa.int8(),
    "si": pa.int16(),
    "mi": pa.int32(),
    "mi_u": pa.int32(),
    "vb": pa.binary(),
}
UTC = dt.UTC
EXPECTED = [
    (Decimal(1), *[None] * 17, 3, *[None] * 7),
    (
        Decimal(2**63),
        0,
        0,
        0,
        Decimal("0.500"),
        Decimal("0.01"),
        dt.datetime(1000, 1, 1),
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        dt.date(1000, 1, 1),
        "null",
        "new",
        "",
        0,
        b"",
        "",
        "00:00:00.000000",
        1901,
        "",
        2,
        0.0,
        0.0,
        *[0] * 4,
        b"",
    ),
    (
        Decimal(BIGINT_UNSIGNED_MAX),
        1,
        65535,
        4294967295,
        Decimal("12345678901234567890123456789012345.125"),
        Decimal("-9999999999.99"),
        dt.datetime(2025, 3, 9, 2, 30, 0, 1),  # in New York's gap: a JVM zone would shift it
        dt.datetime(2025, 11, 2, 5, 30, 0, 500000, tzinfo=UTC),
        dt.date(2025, 3, 30),
        '{"k": [1, 2.5, "x"]}',
        "Shipped",
        "a,c",
        513,
        b"\x00\xff\x10",
        "line one\nline \\two 'quoted' ünïcode",
        "-838:59:59.000001",
        2155,
        "ab",  # CHAR(5), unpadded
        1,
        1.5,
        2.25,
        -128,
        -32768,
        -8388608,
        16777215,
        b"\x01",
    ),
]


def test_every_type_arrives_exact_and_unsigned_keys_merge_under_shifted_zones(
    loads: Loads,
    my: Database,
    shifted_zones: None,
) -> None:
    my.execute(EVERY_TYPE)
    _insert(my, "things", ROWS)

    first = _load(loads, my, mode="merge", cursor="at")
    my.execute(
        f"UPDATE things SET state = 'paid', at = 4 WHERE id = {BIGINT_UNSIGNED_MAX}",
        f"INSERT INTO things (id, at) VALUES ({BIGINT_UNSIGNED_MAX - 1}, 5)",
    )
    second = _load(loads, my, mode="merge", cursor="at")

    assert first.success, first.failure
    lake = loads.lake()
    assert {name: lake.schema.field(name).type for name in LAKE_TYPES} == LAKE_TYPES
    assert second.success, second.failure
    assert (second.metadata["rows_inserted"], second.metadata["rows_updated"]) == (1, 1)
    expected = [*EXPECTED[:2], (Decimal(BIGINT_UNSIGNED_MAX - 1), *[None] * 17, 5, *[None] * 7)]
    changed = list(EXPECTED[2])
    changed[10], changed[18] = "paid", 4
    assert loads.rows(list(LAKE_TYPES)) == sorted([*expected, tuple(changed)])


@pytest.mark.parametrize(
    ("cursor", "recorded"),
    [
        ("wall", "2025-11-02T01:30:00.000002"),  # New York's repeated hour, as a wall clock
        ("moment", "2025-03-09T07:30:00.000002+00:00"),  # an instant, in UTC
    ],
)
def test_datetime_and_timestamp_cursors_window_exactly_under_shifted_zones(
    loads: Loads,
    my: Database,
    shifted_zones: None,
    cursor: str,
    recorded: str,
) -> None:
    my.execute(
        f"CREATE TABLE things (id INT PRIMARY KEY, {cursor} "
        + ("DATETIME(6)" if cursor == "wall" else "TIMESTAMP(6)")
        + " NOT NULL)"
    )
    base = recorded[:26].replace("T", " ")
    earlier = base[:-1] + "1"
    _insert(my, "things", [(1, earlier), (2, base)])
    loads.configure(my, "things", mode="append", cursor=cursor, primary_key=["id"])
    first = loads.run()
    _insert(my, "things", [(3, base), (4, earlier), (5, base[:-1] + "3")])

    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    assert first.metadata["cursor"] == recorded
    assert first.metadata["cursor_type"] == ("timestamp" if cursor == "wall" else "timestamptz")
    # The new tie with the bound is read, the row below it (committed late) is not, the newer is.
    assert second.metadata["rows_written"] == 2
    assert second.metadata["cursor"] == recorded[:25] + "3" + recorded[26:]
    assert [r[0] for r in loads.rows(["id"])] == [1, 2, 3, 5]


def test_a_zero_date_is_refused_naming_the_column_and_moves_nothing(
    loads: Loads,
    my: Database,
) -> None:
    my.execute("CREATE TABLE things (id INT PRIMARY KEY, shipped DATE, at INT NOT NULL)")
    my.execute("INSERT INTO things VALUES (1, '2025-01-01', 1)")
    loads.configure(my, "things", mode="merge", cursor="at")
    first = loads.run()
    my.execute("SET SESSION sql_mode = ''", "INSERT INTO things VALUES (2, '0000-00-00', 2)")

    refused = loads.run()

    assert first.success, first.failure
    assert not refused.success
    failure = refused.failure or ""
    assert "column 'shipped' of table 'things' holds a zero date" in failure
    assert "NULLIF(shipped, '0000-00-00')" in failure
    assert "Traceback" not in failure
    assert loads.metadata()["cursor"] == first.metadata["cursor"]
    assert loads.rows(["id", "shipped"]) == [(1, dt.date(2025, 1, 1))]


def test_a_decimal_value_wider_than_the_lake_holds_is_refused_not_rounded(
    loads: Loads,
    my: Database,
) -> None:
    my.execute("CREATE TABLE things (id INT PRIMARY KEY, wide DECIMAL(65, 30), at INT NOT NULL)")
    my.execute("INSERT INTO things VALUES (1, 0.125, 1), (2, 0.0001, 2)")

    run = _load(loads, my, mode="merge", cursor="at")

    assert not run.success
    failure = run.failure or ""
    assert "column 'wide' of table 'things' holds 0.000100000000000000000000000000" in failure
    assert "which decimal(38,3) can't hold exactly" in failure
    assert loads.files() == []


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_text_cursors_that_differ_only_in_case_or_trailing_spaces_are_ties(
    loads: Loads,
    my: Database,
    mode: str,
) -> None:
    """The default collation is case-insensitive and pads: 'a' = 'A' = 'a ' in the database."""
    my.execute(
        "CREATE TABLE things (id INT PRIMARY KEY, tag VARCHAR(20) NOT NULL, v INT NOT NULL)"
        " DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci"
    )
    my.execute("INSERT INTO things VALUES (1, 'a', 0), (2, 'B', 0)")
    loads.configure(my, "things", mode=mode, cursor="tag", primary_key=["id"])
    first = loads.run()
    # Ties with the bound in every spelling, one below it, one past it.
    my.execute("INSERT INTO things VALUES (3, 'b', 0), (4, 'B  ', 0), (5, 'A', 0), (6, 'c', 0)")
    second = loads.run()
    my.execute("INSERT INTO things VALUES (7, 'C ', 0), (8, 'c', 0)")
    my.execute("UPDATE things SET v = 1 WHERE id = 6")
    third = loads.run()
    fourth = loads.run()

    for run in (first, second, third, fourth):
        assert run.success, run.failure
    ids = [r[0] for r in loads.rows(["id"])]
    assert ids == sorted(set(ids)), "a row landed twice"
    # 5 sorts below the bound: only a lookback would see it. Append keeps one version per key
    # and cursor value, so the tied row changed in place is a new version only for merge.
    assert set(ids) == {1, 2, 3, 4, 6, 7, 8}
    if mode == "merge":
        assert dict(loads.rows(["id", "v"]))[6] == 1
    assert fourth.metadata["rows_written"] == 0


# Spellings MySQL's default collations hold equal to 'abc': case, trailing spaces (the PAD SPACE
# collations), accents.
RESPELLED = {"case": "ABC", "trailing space": "abc ", "accent": "àbc"}


@pytest.mark.parametrize("spelling", list(RESPELLED))
def test_a_merge_key_respelled_as_the_database_holds_equal_stays_one_row(
    loads: Loads,
    my: Database,
    spelling: str,
) -> None:
    """The database holds 'abc' and 'ABC' one key: the update replaces the lake's row.

    Compared byte for byte, the lake kept both spellings, and `primary_key_unique` passed.
    """
    my.execute(
        "CREATE TABLE things (id VARCHAR(10) PRIMARY KEY, at INT NOT NULL, v INT NOT NULL)"
        " DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci"
    )
    my.execute("INSERT INTO things VALUES ('abc', 1, 0), ('xyz', 1, 0)")
    loads.configure(my, "things", mode="merge", cursor="at")
    first = loads.run()
    my.execute(f"UPDATE things SET id = '{RESPELLED[spelling]}', at = 2, v = 1 WHERE id = 'abc'")
    second = loads.run()

    for run in (first, second):
        assert run.success, run.failure
    assert loads.rows(["id", "v"]) == sorted([(RESPELLED[spelling], 1), ("xyz", 0)])
    assert second.metadata["rows_inserted"] == 0
    assert second.metadata["rows_updated"] == 1


def test_a_key_converted_to_another_collation_is_read_whole_once_and_stays_one_row(
    loads: Loads,
    my: Database,
) -> None:
    """latin1 and utf8mb4 weigh 'abc' differently: the lake's weights stopped matching."""
    my.execute(
        "CREATE TABLE things (id VARCHAR(10) PRIMARY KEY, at INT NOT NULL, v INT NOT NULL)"
        " DEFAULT CHARSET latin1 COLLATE latin1_swedish_ci"
    )
    my.execute("INSERT INTO things VALUES ('abc', 1, 0), ('xyz', 1, 0)")
    loads.configure(my, "things", mode="merge", cursor="at")
    first = loads.run()
    my.execute("ALTER TABLE things CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
    my.execute("UPDATE things SET at = 2, v = 1 WHERE id = 'abc'")
    converted = loads.run()
    my.execute("UPDATE things SET at = 3, v = 2 WHERE id = 'xyz'")
    later = loads.run()

    for run in (first, converted, later):
        assert run.success, run.failure
    assert loads.rows(["id", "v"]) == [("abc", 1), ("xyz", 2)]
    assert (first.metadata["full_refresh"], converted.metadata["full_refresh"]) == (True, True)
    assert later.metadata["full_refresh"] is False


def test_reconcile_keeps_a_key_the_database_respelled_without_moving_the_cursor(
    loads: Loads,
    my: Database,
) -> None:
    """Compared byte for byte, 'ABC' in the source looked like 'abc' deleted: the row was lost."""
    my.execute(
        "CREATE TABLE things (id VARCHAR(10) PRIMARY KEY, at INT NOT NULL)"
        " DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci"
    )
    # 'abc' sits below the cursor (2): no run reads it again.
    my.execute("INSERT INTO things VALUES ('abc', 1), ('gone', 1), ('zzz', 2)")
    loads.configure(my, "things", mode="merge", cursor="at", deletes="reconcile")
    first = loads.run()
    my.execute("UPDATE things SET id = 'ABC ' WHERE id = 'abc'")
    my.execute("DELETE FROM things WHERE id = 'gone'")
    second = loads.run()

    for run in (first, second):
        assert run.success, run.failure
    assert second.metadata["deletes_reconciled"] is True
    assert loads.rows(["id"]) == [("abc",), ("zzz",)]


def test_keys_come_from_the_catalog_and_columns_can_be_chosen(
    loads: Loads,
    my: Database,
) -> None:
    my.execute(
        "CREATE TABLE things (region CHAR(2), id INT, secret TEXT, note TEXT, at INT NOT NULL,"
        " PRIMARY KEY (region, id))"
    )
    my.execute("INSERT INTO things VALUES ('eu', 1, 's', 'n', 1), ('us', 1, 's', 'n', 1)")
    loads.configure(my, "things", mode="merge", cursor="at", exclude_columns=["secret"])
    first = loads.run()
    my.execute("UPDATE things SET note = 'changed', at = 2 WHERE region = 'eu'")
    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    assert (second.metadata["rows_inserted"], second.metadata["rows_updated"]) == (0, 1)
    lake = loads.lake()
    assert "secret" not in lake.column_names
    assert loads.rows(["region", "id", "note"]) == [("eu", 1, "changed"), ("us", 1, "n")]


def test_each_partition_reads_the_window_predicate_and_a_jdbc_mariadb_url_works(
    loads: Loads,
    tmp_path: Path,
    my: Database,
) -> None:
    my.execute("CREATE TABLE things (id INT PRIMARY KEY, at INT NOT NULL)")
    my.execute(
        "INSERT INTO things SELECT seq, seq FROM seq_1_to_400"  # MariaDB's sequence engine
    )
    source = my.source(rows_per_partition=100, max_partitions=4)
    source["url"] = source["url"].replace("jdbc:mysql:", "jdbc:mariadb:")
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"shop": source},
        "tables": [
            {
                "name": "things",
                "source": "shop",
                "table": f"{my.name}.things",
                "mode": "append",
                "cursor": "at",
                "transaction_cap": False,
            }
        ],
    }
    loads.write(config)
    assert loads.run().success
    my.execute("INSERT INTO things SELECT seq, seq FROM seq_401_to_800")
    with _general_log(my) as reads:
        run = loads.run()

    assert run.success, run.failure
    assert run.metadata["rows_written"] == 400
    window = "WHERE `at` >= 400 AND `at` <= 800) AS src  WHERE "  # and a partition's range
    partitions = [r for r in reads() if window in r]
    assert len(partitions) == 4, reads()
    assert [r[0] for r in loads.rows(["id"])] == list(range(1, 801))


@contextmanager
def _general_log(my: Database) -> Iterator[Callable[[], list[str]]]:
    """Every statement the server runs while the block is open (the general query log)."""
    my.execute(
        "SET GLOBAL log_output = 'TABLE'",
        "TRUNCATE mysql.general_log",
        "SET GLOBAL general_log = 1",
    )
    try:
        yield lambda: [
            row[0].decode() if isinstance(row[0], bytes) else row[0]
            for row in my.query(
                "SELECT argument FROM mysql.general_log WHERE command_type = 'Query' "
                f"AND argument LIKE '%FROM {my.name}.things%'"
            )
        ]
    finally:
        my.execute("SET GLOBAL general_log = 0")


def test_a_query_is_read_in_the_servers_own_sql_mode(
    loads: Loads,
    my: Database,
) -> None:
    """Under NO_BACKSLASH_ESCAPES the query's 'a\\b' is the three characters its author meant."""
    my.execute(
        "CREATE TABLE things (id INT PRIMARY KEY, tag VARCHAR(10) NOT NULL, at INT NOT NULL)"
    )
    my.execute("INSERT INTO things VALUES (1, CONCAT('a', CHAR(92), 'b'), 1), (2, 'ab', 1)")
    with my.sql_mode("NO_BACKSLASH_ESCAPES"):
        query = "SELECT * FROM things WHERE tag <> 'a\\b'"
        run = _load(loads, my, query=query, cursor="at")

    assert run.success, run.failure
    assert loads.rows(["id"]) == [(2,)]


def test_char_arrives_unpadded_whatever_the_servers_sql_mode(
    loads: Loads,
    my: Database,
) -> None:
    """PAD_CHAR_TO_FULL_LENGTH in the server's SQL mode padded CHAR values (and merge keys)."""
    my.execute("CREATE TABLE things (id CHAR(5) PRIMARY KEY, at INT NOT NULL)")
    my.execute("INSERT INTO things VALUES ('ab', 1)")
    with my.sql_mode("PAD_CHAR_TO_FULL_LENGTH"):
        run = _load(loads, my, mode="merge", cursor="at")

    assert run.success, run.failure
    assert loads.rows(["id"]) == [("ab",)]


def test_a_named_time_zone_needs_the_servers_zone_tables(
    loads: Loads,
    my: Database,
) -> None:
    my.execute("CREATE TABLE things (id INT PRIMARY KEY, wall DATETIME(6) NOT NULL)")
    my.execute("INSERT INTO things VALUES (1, '2025-01-01 00:00:00')")

    run = _load(loads, my, mode="append", cursor="wall", timezone="Europe/Paris")

    assert not run.success
    failure = run.failure or ""
    assert "Table 'things', field 'timezone'" in failure
    assert "mariadb-tzinfo-to-sql" in failure
    assert "Traceback" not in failure


@pytest.mark.parametrize(
    ("before", "after"), [("1.50", "1.70"), ("2025-01-01 00:00:00.1", "2025-01-01 00:00:00.2")]
)
def test_a_tied_row_changed_below_its_integer_part_is_work(
    loads: Loads,
    my: Database,
    before: str,
    after: str,
) -> None:
    """The no-JVM check's fingerprint of the tied rows sees every digit of a value."""
    kind = "DECIMAL(10, 2)" if "." in before and ":" not in before else "DATETIME(6)"
    my.execute(f"CREATE TABLE things (id INT PRIMARY KEY, v {kind}, at INT NOT NULL)")
    my.execute(f"INSERT INTO things VALUES (1, '{before}', 1)")
    loads.configure(my, "things", mode="merge", cursor="at")
    assert loads.run().success
    my.execute(f"UPDATE things SET v = '{after}'")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["rows_updated"] == 1
    expected = Decimal(after) if kind.startswith("DECIMAL") else dt.datetime.fromisoformat(after)
    assert loads.rows(["v"]) == [(expected,)]


@pytest.mark.parametrize("keyed", [True, False])
def test_append_keeps_each_row_once_when_ties_differ_only_in_case(
    loads: Loads,
    my: Database,
    keyed: bool,
) -> None:
    """Found by the model-based test on MariaDB: the tie 'C1' was appended again after 'c1'."""
    my.execute("CREATE TABLE things (id INT, tag VARCHAR(10) NOT NULL)")
    key: dict[str, Any] = {"primary_key": ["id"]} if keyed else {}
    loads.configure(my, "things", mode="append", cursor="tag", **key)
    runs = []
    for row in [(1, "c1"), (2, "C1"), (3, "c2")]:
        my.execute(f"INSERT INTO things VALUES {row}")
        runs.append(loads.run())

    assert all(run.success for run in runs), [run.failure for run in runs]
    assert [run.metadata["rows_written"] for run in runs] == [1, 1, 1]
    assert loads.rows(["id", "tag"]) == [(1, "c1"), (2, "C1"), (3, "c2")]


@pytest.mark.xdist_group("connect")
def test_over_spark_connect_tinyint1_is_still_a_number(
    make_project: ProjectBuilder, my: Database, tmp_path: Path, connect: str
) -> None:
    """Spark Connect lower-cases reader options; the driver's properties travel in the URL."""
    my.execute("CREATE TABLE things (id INT PRIMARY KEY, flag TINYINT(1), at INT NOT NULL)")
    my.execute("INSERT INTO things VALUES (1, 1, 1), (2, 7, 2)")
    config = make_project.cli_config(my, "things", remote=connect, mode="merge", cursor="at")

    done = run_cli(tmp_path, cli_env(config, tmp_path / "home"), "--select", "things")

    assert done.returncode == 0, done.stderr[-2000:]
    lake = read_lake(tmp_path / "lake", "things")
    assert lake.schema.field("flag").type == pa.int8()
    assert _lake(tmp_path, ["id", "flag"]) == [(1, 1), (2, 7)]


def test_a_mysql_table_records_every_metadata_key_a_postgresql_one_does(
    loads: Loads,
    pg: Schema,
    postgres: PostgresServer,
    my: Database,
    mariadb: MariaDbServer,
) -> None:
    """The same table and the same changes on both: first load, a merge, then nothing new."""
    recorded: dict[str, list[set[str]]] = {}
    for db in (SourceDb("postgres", pg, postgres), SourceDb("mariadb", my, mariadb)):
        name = f"things_{db.kind}"
        db.execute(
            f"CREATE TABLE {name} (id int PRIMARY KEY, v {{text}}, at {{tstz}}, gone {{bool}})"
        )
        db.insert(name, [(i, "a", f"2025-01-01 00:00:0{i}", False) for i in range(1, 4)])
        loads.configure(
            db, name, mode="merge", cursor="at", delete_column="gone", deletes="reconcile"
        )
        runs = [loads.run()]
        db.execute(f"UPDATE {name} SET v = 'b', at = '2025-01-02 00:00:00' WHERE id = 1")
        db.execute(f"DELETE FROM {name} WHERE id = 2")
        runs += [loads.run() for _ in range(2)]
        assert all(run.success for run in runs), [run.failure for run in runs]
        assert [run.metadata["rows_deleted"] for run in runs] == [0, 1, 0]
        recorded[db.kind] = [set(run.metadata) for run in runs]

    assert recorded["mariadb"] == recorded["postgres"]
    expected = {"transaction_cap", "window_fingerprint", "spark", "merge_strategy"}
    assert expected <= recorded["mariadb"][1]
