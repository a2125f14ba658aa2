"""What an Iceberg merge does to each key (`writers/matched.py`), and what it costs: the
physical plans of its two passes over the table (matching the delta's keys, deleting the replaced
rows) broadcast the delta to the table's scan, so no `Exchange` lies between the scan and the
join. A `MERGE INTO` with an insert clause is an outer join that shuffles the whole table with
its row positions.

Spark's own broadcast by size is turned off here, as it is for a delta read over JDBC (no
statistics): the plan holds because the writer asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from incremental_assets.writers.matched import (
    KeyRange,
    Tally,
    decided,
    delete_sql,
    replaced_keys,
    tally,
)
from incremental_assets.writers.versions import DELETED, GONE
from incremental_assets_tests.support.plans import write_plan

ROWS = 2_000


@pytest.fixture
def table(spark: SparkSession, catalog: str) -> Iterator[str]:
    name = f"{catalog}.shop.orders"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.shop")
    spark.sql(
        f"CREATE TABLE {name} USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.merge.mode'='merge-on-read') AS "
        f"SELECT id, CAST(id AS string) AS note, id AS c, 1L AS _batch FROM range({ROWS})"
    )
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    yield name
    spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")


def _delta(spark: SparkSession) -> DataFrame:
    """Seven keys changed, one the same as the lake's, one deleted, one new."""
    rows: list[tuple[int, str | None, int, int, bool, bool]] = [
        (i * 100, "changed", ROWS + i, 2, False, False) for i in range(1, 8)
    ]
    rows += [(900, "900", 900, 2, False, False), (1000, None, ROWS, 2, True, False)]
    rows += [(ROWS + 5, "new", ROWS + 5, 2, False, False)]
    schema = f"id long, note string, c long, _batch long, {DELETED} boolean, {GONE} boolean"
    return spark.createDataFrame(rows, schema).localCheckpoint()


def _exchanges_above_scan(plan: str, table: str) -> list[str]:
    """The `Exchange` nodes between the table's scan and the join above it, in a plan's tree."""
    lines = plan.splitlines()
    scan = next(i for i, line in enumerate(lines) if "BatchScan" in line and table in line)
    found: list[str] = []
    depth = _depth(lines[scan])
    for line in reversed(lines[:scan]):
        if _depth(line) >= depth or not line.strip():
            continue
        depth = _depth(line)
        node = line.strip().lstrip(":+- ")
        if "Join" in node.split(" ")[0]:
            return found
        if node.startswith("Exchange"):
            found.append(node)
    raise AssertionError(f"no join above the scan of {table}:\n{plan}")


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(" :+-"))


def test_matching_the_delta_broadcasts_it_to_the_tables_scan(
    spark: SparkSession, table: str
) -> None:
    plan = write_plan()
    decisions = decided(spark.table(table), _delta(spark), plan, None, keys=10)

    explained = decisions._jdf.queryExecution().executedPlan().toString()

    assert _exchanges_above_scan(explained, table) == [], explained
    assert "BroadcastHashJoin" in explained, explained
    # Seven keys updated, one new inserted, one deleted (its lake row), one left as it is.
    assert tally(decisions) == Tally(
        inserted=1, updated=7, deleted=1, duplicate_keys=0, replaced_keys=8
    )


def test_deleting_the_replaced_rows_broadcasts_the_keys_to_the_tables_scan(
    spark: SparkSession, table: str
) -> None:
    plan = write_plan()
    decisions = decided(spark.table(table), _delta(spark), plan, None, keys=10)
    keys = replaced_keys(decisions.localCheckpoint(), plan, keys=10)
    keys.createOrReplaceTempView("replaced")
    span = KeyRange("id", 100, 1000)

    explained = spark.sql(f"EXPLAIN {delete_sql(table, 'replaced', plan, span)}").first()
    assert explained is not None
    text = explained[0]

    assert _exchanges_above_scan(text, table) == [], text
    assert "BroadcastHashJoin" in text, text
    assert "MergeRows" in text and "id <= 1000" in text, text  # the span is pushed to the scan
    spark.sql(delete_sql(table, "replaced", plan, span))
    left = spark.table(table).where(F.col("id").isin([i * 100 for i in range(1, 11)]))
    assert sorted(r.id for r in left.collect()) == [800, 900]  # not in the delta; unchanged


def test_a_large_delta_is_left_to_sparks_own_join(spark: SparkSession, table: str) -> None:
    """Above `BROADCAST_ROWS` the writer asks for nothing: broadcast off, Spark shuffles."""
    decisions = decided(spark.table(table), _delta(spark), write_plan(), None, keys=10**9)

    explained = decisions._jdf.queryExecution().executedPlan().toString()

    assert _exchanges_above_scan(explained, table) != [], explained


def test_a_key_the_lake_holds_twice_keeps_its_newer_copy_from_an_older_delta(
    spark: SparkSession, catalog: str
) -> None:
    """Review finding: one lake copy older than the delta's version replaced the key whole, and
    the copy newer than it was lost. A key is replaced only if the delta's version is as new as
    every lake row of it."""
    name = f"{catalog}.shop.doubled"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.shop")
    spark.sql(
        f"CREATE TABLE {name} USING iceberg AS SELECT * FROM VALUES "
        "(1L, 'a', 10L, 1L), (1L, 'a-newer', 30L, 1L), (2L, 'b', 10L, 1L) AS t(id, note, c, _batch)"
    )
    schema = f"id long, note string, c long, _batch long, {DELETED} boolean, {GONE} boolean"
    older = spark.createDataFrame([(1, "a-20", 20, 2, False, False)], schema)
    newest = spark.createDataFrame([(1, "a-40", 40, 2, False, False)], schema)

    kept = tally(decided(spark.table(name), older, write_plan(), None, keys=1))
    replaced = tally(decided(spark.table(name), newest, write_plan(), None, keys=1))

    assert kept == Tally(inserted=0, updated=0, deleted=0, duplicate_keys=1, replaced_keys=0)
    assert replaced == Tally(inserted=0, updated=1, deleted=0, duplicate_keys=0, replaced_keys=1)
