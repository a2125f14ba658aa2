"""Which versions a merge keeps, the key count it makes as it writes them, and the canonical form
of values (maps as entries sorted by key) that a row's hash and a merge's comparison share."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from incremental_assets.writers.base import counted, observed
from incremental_assets.writers.versions import (
    BUCKET,
    GONE,
    KEY_CLASHES,
    comparable_sql,
    latest_versions,
    row_hash,
    version_counts,
    with_key_count,
)
from incremental_assets_tests.support.plans import write_plan as _plan


def test_the_key_count_made_while_writing_finds_every_key_written_twice(
    spark: SparkSession,
) -> None:
    """What `primary_key_unique` reports for a merge that counted its keys as it wrote them."""
    rows = [(1, "a"), (2, "b"), (2, "b2"), (3, "c"), (3, "c2"), (3, "c3"), (4, "d")]
    frame = spark.createDataFrame(rows, "id long, v string").withColumn(
        BUCKET, (F.col("id") % 2).cast("bigint")
    )

    checked, keys = with_key_count(frame.repartition(BUCKET), _plan(cursor_column="c"))
    checked, written = counted(checked, "written")
    assert checked.columns == frame.columns
    checked.collect()

    assert observed(keys, "duplicate_keys") == 2  # keys 2 and 3
    assert observed(written) == 7  # every row is still written


ITEMS = "array<struct<sku: string, tags: map<string, int>>>"


@pytest.mark.parametrize(
    ("kind", "left", "right", "equal"),
    [
        ("map<string, int>", "map('a', 1, 'b', 2)", "map('b', 2, 'a', 1)", True),
        ("map<string, int>", "map('a', 1, 'b', 2)", "map('a', 1, 'b', 3)", False),
        ("map<string, int>", "map('a', 1)", "map('b', 1)", False),
        ("map<string, int>", "map('a', 1)", "map('a', 1, 'b', 2)", False),
        (
            "map<int, map<string, int>>",
            "map(1, map('x', 1, 'y', 2), 2, map())",
            "map(2, map(), 1, map('y', 2, 'x', 1))",
            True,
        ),
        (
            ITEMS,
            "array(named_struct('sku', 's', 'tags', map('p', 1, 'q', 2)))",
            "array(named_struct('sku', 's', 'tags', map('q', 2, 'p', 1)))",
            True,
        ),
        (
            ITEMS,
            "array(named_struct('sku', 's', 'tags', map('p', 1, 'q', 2)))",
            "array(named_struct('sku', 's', 'tags', map('p', 2, 'q', 1)))",
            False,
        ),
        (
            ITEMS,
            "array(named_struct('sku', 's', 'tags', map('p', 1)), NULL)",
            "array(named_struct('sku', 's', 'tags', map('p', 1)), NULL)",
            True,
        ),
        (
            ITEMS,
            "array(named_struct('sku', 's', 'tags', CAST(NULL AS map<string, int>)))",
            "array(named_struct('sku', 's', 'tags', map('p', 1)))",
            False,
        ),
        (
            "struct<m: map<string, string>>",
            "named_struct('m', map('a', NULL, 'b', 'x'))",
            "named_struct('m', map('b', 'x', 'a', NULL))",
            True,
        ),
        ("map<string, string>", "map('a', NULL)", "map('a', 'x')", False),
        ("map<string, string>", "NULL", "NULL", True),
        ("map<string, string>", "NULL", "map('a', 'x')", False),
        ("struct<m: map<string, string>>", "NULL", "NULL", True),
        ("array<int>", "array(1, 2)", "array(1, 2)", True),  # no map: the value as it is
    ],
)
def test_values_hash_and_compare_equal_exactly_when_equal_whatever_their_maps_entry_order(
    spark: SparkSession, kind: str, left: str, right: str, equal: bool
) -> None:
    """The row hash (versions) and the merge's comparison (`MERGE INTO`) agree on every value."""
    frame = spark.sql(f"SELECT CAST({left} AS {kind}) AS l, CAST({right} AS {kind}) AS r")
    types = frame.schema
    same = (
        f"{comparable_sql('`l`', types['l'].dataType)} <=> "
        f"{comparable_sql('`r`', types['r'].dataType)}"
    )

    found = frame.select(
        (row_hash(["l"], types) == row_hash(["r"], types)).alias("hashed"),
        F.expr(same).alias("compared"),
    ).first()

    assert found is not None
    assert (found["hashed"], found["compared"]) == (equal, equal)


def test_copies_of_a_row_whose_maps_list_entries_in_another_order_are_one_version(
    spark: SparkSession,
) -> None:
    """Two copies of a key at one cursor value are one row when their maps are equal; when their
    maps differ they clash (the key doesn't identify one row)."""
    rows = spark.sql(
        "SELECT * FROM VALUES "
        "(1, 5, map('a', 1, 'b', 2), array(named_struct('t', map('x', 'p', 'y', 'q')))), "
        "(1, 5, map('b', 2, 'a', 1), array(named_struct('t', map('y', 'q', 'x', 'p')))), "
        "(2, 5, map('a', 1), array(named_struct('t', map('x', 'p')))), "
        "(2, 5, map('a', 2), array(named_struct('t', map('x', 'p')))) "
        "AS t(id, c, m, items)"
    )

    winners = latest_versions(rows, _plan()).localCheckpoint()

    assert version_counts(winners, _plan()) == {
        "rows": 4,
        "null_keys": 0,
        "clashes": 1,
        "keys": 2,
    }
    clashes = {r["id"]: r[KEY_CLASHES] for r in winners.collect()}
    assert clashes == {1: 0, 2: 1}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ((None, "x"), ("x", None)),  # the same values in other columns
        ((None, None), ("", None)),
    ],
)
def test_rows_that_differ_only_in_which_column_is_null_hash_apart(
    spark: SparkSession, left: tuple[Any, ...], right: tuple[Any, ...]
) -> None:
    """xxhash64 skips NULLs: without the NULL flags, an update that moves a NULL from one column
    to another (at the same cursor, as a re-read row) looked unchanged and was never written."""
    frame = spark.createDataFrame([left, right], "a string, b string")
    hashed = frame.select(row_hash(["a", "b"], frame.schema).alias("h")).collect()
    assert hashed[0]["h"] != hashed[1]["h"]


def test_a_null_array_and_an_empty_one_hash_apart(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(None,), ([],)], "a array<int>")
    hashed = frame.select(row_hash(["a"], frame.schema).alias("h")).collect()
    assert hashed[0]["h"] != hashed[1]["h"]


@pytest.mark.parametrize(
    ("kind", "left", "right"),
    [
        ("array<string>", "array('x')", "array('x', NULL)"),
        ("array<string>", "array(NULL, 'x')", "array('x', NULL)"),
        (
            "struct<a:string,b:string>",
            "named_struct('a', 'p', 'b', NULL)",
            "named_struct('a', NULL, 'b', 'p')",
        ),
        ("array<struct<a:int>>", "array(named_struct('a', NULL))", "array(named_struct('a', 1))"),
        ("map<string,string>", "map('k', NULL)", "map('k', 'v')"),
    ],
)
def test_nested_values_that_differ_only_in_a_null_inside_hash_apart(
    spark: SparkSession, kind: str, left: str, right: str
) -> None:
    """The review's finding: a plain merge took a re-read row whose array gained a NULL for the
    lake's (the hashes agreed), and never wrote the change."""
    frame = spark.sql(
        f"SELECT CAST({left} AS {kind}) AS c UNION ALL SELECT CAST({right} AS {kind})"
    )
    hashed = frame.select(row_hash(["c"], frame.schema).alias("h")).collect()
    assert hashed[0]["h"] != hashed[1]["h"]


def test_the_winners_count_holds_the_gone_keys_the_delta_has_no_version_of(
    spark: SparkSession,
) -> None:
    """Review finding: the broadcast was sized by the delta's rows, without reconcile's gone
    keys, which a purge makes millions of."""
    rows = spark.sql("SELECT * FROM VALUES (1, 5), (2, 5) AS t(id, c)")
    winners = latest_versions(rows, _plan()).withColumn(GONE, F.lit(False))
    gone = spark.sql("SELECT id FROM range(10, 13)").withColumn(GONE, F.lit(True))

    counts = version_counts(winners.unionByName(gone, True).localCheckpoint(), _plan())

    assert (counts["rows"], counts["keys"]) == (2, 5)
