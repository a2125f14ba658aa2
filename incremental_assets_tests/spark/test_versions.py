"""Which versions a merge keeps, and the key count it makes as it writes them."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from incremental_assets.config import LakeSpec
from incremental_assets.lake import LakeFacts, open_lake
from incremental_assets.writers.base import WritePlan, counted, observed
from incremental_assets.writers.versions import BUCKET, with_key_count


def test_the_key_count_made_while_writing_finds_every_key_written_twice(
    spark: SparkSession,
) -> None:
    """What `primary_key_unique` reports for a merge that counted its keys as it wrote them."""
    lake = open_lake(LakeSpec(path="/tmp/unused"), "t")
    plan = WritePlan(
        lake=lake,
        facts=LakeFacts(uri="/tmp/unused"),
        txn="t",
        batch=1,
        cursor=None,
        replace_all=False,
        primary_key=("id",),
        cursor_column="c",
        delete_column=None,
        buckets=4,
        bucket_rows=10,
        compression="zstd",
        max_rows_per_file=10,
    )
    rows = [(1, "a"), (2, "b"), (2, "b2"), (3, "c"), (3, "c2"), (3, "c3"), (4, "d")]
    frame = spark.createDataFrame(rows, "id long, v string").withColumn(
        BUCKET, (F.col("id") % 2).cast("bigint")
    )

    checked, keys = with_key_count(frame.repartition(BUCKET), plan)
    checked, written = counted(checked, "written")
    assert checked.columns == frame.columns
    checked.collect()

    assert observed(keys, "duplicate_keys") == 2  # keys 2 and 3
    assert observed(written) == 7  # every row is still written
