"""Hard deletes: `deletes: reconcile` compares the source's keys with the lake's.

The deletes themselves are checked on both lake formats; when a reconcile is due, and a key read
through the JVM's zone, on plain Parquet only: neither depends on the format.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema

DEFAULTS = {**ITEMS_MERGE, "deletes": "reconcile", "transaction_cap": False}


def test_reconcile_removes_rows_deleted_at_the_source(
    loads: Loads,
    db: SourceDb,
    lake_format: LakeFormat,
) -> None:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, at int NOT NULL)")
    db.insert("items", [(i, i) for i in range(1, 101)])
    loads.configure(db, DEFAULTS)
    assert loads.run().success
    db.execute("DELETE FROM items WHERE id IN (3, 50, 77)")
    db.execute("INSERT INTO items VALUES (101, 101)")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["deletes_reconciled"] is True
    assert (run.metadata["rows_inserted"], run.metadata["rows_deleted"]) == (1, 3)
    assert loads.rows(["id", "at"]) == sorted(db.query("SELECT id, at FROM items"))


def test_reconcile_every_n_runs_waits_for_its_turn(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i FROM generate_series(1, 10) i")
    loads.configure(pg, DEFAULTS, reconcile_every=3)
    assert loads.run().success  # batch 1
    pg.execute("DELETE FROM items WHERE id = 4")
    pg.execute("INSERT INTO items VALUES (11, 11)")

    second = loads.run()  # batch 2: not its turn
    pg.execute("INSERT INTO items VALUES (12, 12)")
    third = loads.run()  # batch 3: reconciles

    assert "deletes_reconciled" not in second.metadata and second.metadata["rows_deleted"] == 0
    assert third.metadata["deletes_reconciled"] is True and third.metadata["rows_deleted"] == 1
    assert 4 not in [r[0] for r in loads.rows(["id"])]


@pytest.fixture
def jvm_in_new_york(spark: SparkSession) -> Iterator[None]:
    """The JVM's default zone, which the JDBC driver converts wall-clock values through."""
    time_zone = spark._jvm.java.util.TimeZone  # type: ignore[union-attr]
    saved = time_zone.getDefault()
    time_zone.setDefault(time_zone.getTimeZone("America/New_York"))
    try:
        yield
    finally:
        time_zone.setDefault(saved)


def test_reconcile_keeps_a_timestamp_key_that_falls_in_a_gap_of_the_jvms_zone(
    loads: Loads,
    pg: Schema,
    jvm_in_new_york: None,
) -> None:
    """02:30 on 2025-03-09 does not exist in New York; read through the driver it became 03:30."""
    pg.execute(
        "CREATE TABLE items (id timestamp PRIMARY KEY, at int NOT NULL)",
        "INSERT INTO items VALUES ('2025-03-09 02:30:00', 1), ('2025-03-09 05:00:00', 2)",
    )
    loads.configure(pg, DEFAULTS, primary_key=["id"])
    assert loads.run().success
    pg.execute("INSERT INTO items VALUES ('2025-03-10 00:00:00', 3)")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["deletes_reconciled"] is True
    assert run.metadata["rows_deleted"] == 0
    assert loads.rows(["id", "at"]) == sorted(pg.query("SELECT id, at FROM items"))


def test_reconcile_runs_when_no_row_is_new(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
) -> None:
    """Found by the model-based test: every key deleted, nothing past the cursor, keys stayed."""
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO items VALUES (1, 100), (2, 100)")
    loads.configure(pg, DEFAULTS)
    assert loads.run().success
    pg.execute("DELETE FROM items")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["deletes_reconciled"] is True
    assert run.metadata["rows_deleted"] == 2
    assert run.metadata["dagster/row_count"] == 0
    assert loads.lake().num_rows == 0
