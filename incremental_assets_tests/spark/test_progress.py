"""Spark's progress is logged while a long job runs."""

from __future__ import annotations

import time

from pyspark.sql import SparkSession

from incremental_assets.progress import spark_progress


def test_a_long_job_reports_its_stages_as_it_goes(spark: SparkSession) -> None:
    lines: list[str] = []

    def slow(value: int) -> int:
        time.sleep(0.5)
        return value

    with spark_progress(spark, lines.append, every=0.3):
        total = spark.sparkContext.parallelize(range(8), 4).map(slow).sum()

    assert total == 28
    assert any("tasks done" in line and "/4" in line for line in lines), lines


def test_a_quick_job_logs_nothing(spark: SparkSession) -> None:
    lines: list[str] = []
    with spark_progress(spark, lines.append, every=30):
        spark.range(10).count()
    assert lines == []
