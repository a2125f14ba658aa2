"""A run's progress lines from a local session: its stages, rows and bytes, while a long job
runs; nothing for a short one."""

from __future__ import annotations

import re
import time

import pytest
from pyspark.sql import SparkSession

from incremental_assets.errors import ConfigError
from incremental_assets.progress import INTERVAL_ENV, progress_interval, run_progress
from incremental_assets.progress_lines import MARK, STAGING
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema


def test_a_long_job_reports_its_stage_and_tasks_as_it_goes(spark: SparkSession) -> None:
    lines: list[str] = []

    def slow(value: int) -> int:
        time.sleep(0.5)
        return value

    with run_progress("orders", lines.append, every=0.3) as progress:
        total = progress.watch(spark).sparkContext.parallelize(range(8), 4).map(slow).sum()

    assert total == 28
    assert any(
        line.startswith(f"orders: {MARK} ") and "Spark stage" in line and "/4 tasks done" in line
        for line in lines
    ), lines


def test_a_quick_job_logs_nothing(spark: SparkSession) -> None:
    lines: list[str] = []
    with run_progress("orders", lines.append, every=30) as progress:
        progress.watch(spark).range(10).count()
    assert lines == []


def test_a_materialization_logs_its_phase_and_rows_read_while_it_reads(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    pg.execute("INSERT INTO orders SELECT generate_series(1, 6)")
    # Each row the read fetches costs 0.4 s in the database: a read of two seconds or more, in
    # partitions of one row, some of which finish while others still run.
    query = f"SELECT id, length(CAST(pg_sleep(0.4) AS text)) AS pause FROM {pg.name}.orders"
    source = {"rows_per_partition": 1, "max_partitions": 6}
    loads.configure(pg, "orders", source=source, query=query, cursor="id")
    monkeypatch.setenv(INTERVAL_ENV, "0.3")

    run = loads.run()

    assert run.success, run.failure
    messages = [entry.user_message for entry in loads.instance.all_logs(run.run_id)]
    progress = [m for m in messages if m.startswith(f"orders: {MARK} {STAGING}")]
    assert any(re.search(r"; so far [1-6] rows( \([^)]*\))? read", m) for m in progress), messages


def test_the_interval_must_be_a_positive_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(ConfigError, match="INCREMENTAL_ASSETS_PROGRESS_SECONDS='soon'"):
        progress_interval()
