"""Spark's progress is logged while a long job runs."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import SparkSession

from incremental_assets.errors import ConfigError
from incremental_assets.progress import INTERVAL_ENV, progress_interval, spark_progress
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema


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


def test_a_materialization_logs_spark_progress_while_it_reads(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    pg.execute("INSERT INTO orders SELECT generate_series(1, 5)")
    # Each row the read fetches costs 0.4 s in the database: a read of about two seconds.
    query = f"SELECT id, length(CAST(pg_sleep(0.4) AS text)) AS pause FROM {pg.name}.orders"
    loads.configure(pg, "orders", query=query, cursor="id")
    monkeypatch.setenv(INTERVAL_ENV, "0.3")

    run = loads.run()

    assert run.success, run.failure
    messages = [entry.user_message for entry in loads.instance.all_logs(run.run_id)]
    assert any(m.startswith("Spark stage ") and "tasks done" in m for m in messages), messages


def test_the_interval_must_be_a_positive_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(ConfigError, match="INCREMENTAL_ASSETS_PROGRESS_SECONDS='soon'"):
        progress_interval()
