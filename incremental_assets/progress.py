"""What Spark does during a run: its progress while a long job runs (so a long read isn't a silent
wait), and how many jobs and stages the run took (`spark_jobs`, `spark_stages`), so that a new
pass over the data shows in the metadata and in a test."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incremental_assets.errors import ConfigError
from incremental_assets.spark_api import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTERVAL_ENV = "INCREMENTAL_ASSETS_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 15.0


def progress_interval() -> float:
    """Seconds between progress lines: $INCREMENTAL_ASSETS_PROGRESS_SECONDS, else 15."""
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_INTERVAL
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(
            f"{INTERVAL_ENV}='{text}' is not a positive number of seconds; unset it (every "
            f"{DEFAULT_INTERVAL:g}s) or write one, e.g. {INTERVAL_ENV}=5."
        )
    return seconds


@contextmanager
def spark_progress(
    spark: SparkSession, log: Callable[[str], None], every: float | None = None
) -> Iterator[None]:
    """Every `every` seconds (default: `progress_interval()`) while the block runs, log each
    active stage's finished tasks.

    Needs the classic SparkContext; over Spark Connect (no status tracker) it logs nothing.
    """
    interval = progress_interval() if every is None else every
    try:
        tracker = spark.sparkContext.statusTracker()
    except Exception:
        yield
        return
    done = threading.Event()

    def report() -> None:
        while not done.wait(interval):
            for stage_id in tracker.getActiveStageIds():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    log(
                        f"Spark stage {stage_id} ({stage.name.split(' at ')[0]}): "
                        f"{stage.numCompletedTasks}/{stage.numTasks} tasks done, "
                        f"{stage.numActiveTasks} running"
                    )

    thread = threading.Thread(target=report, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


@dataclass
class SparkWork:
    """The Spark jobs and stages a run took; None where they can't be counted (Spark Connect)."""

    jobs: int | None = None
    stages: int | None = None


@contextmanager
def spark_work() -> Iterator[SparkWork]:
    """Count the jobs the process's Spark session runs inside the block, and their stages.

    Jobs are told apart by their ids, which the session numbers in order: a session serves one
    run at a time (a run's own, or the one a process shares between runs), so no other job runs
    meanwhile. A session the block starts counts from nothing.
    """
    work = SparkWork()
    before = _job_ids(_active_session())
    try:
        yield work
    finally:
        session = _active_session()
        after = _job_ids(session)
        if session is None:
            work.jobs, work.stages = 0, 0
        elif after is not None and before is not None:
            tracker = session.sparkContext.statusTracker()
            infos = [tracker.getJobInfo(job) for job in sorted(after - before)]
            work.jobs = len(infos)
            work.stages = sum(len(info.stageIds) for info in infos if info is not None)


def _active_session() -> SparkSession | None:
    """The process's session; none, and pyspark left unimported, where nothing imported it."""
    return sql.SparkSession.getActiveSession() if "pyspark.sql" in sys.modules else None


def _job_ids(session: SparkSession | None) -> set[int] | None:
    """The ids of the jobs the session ran (and still remembers); None over Spark Connect."""
    if session is None:
        return set()
    try:
        return set(session.sparkContext.statusTracker().getJobIdsForGroup())
    except Exception:  # Spark Connect has no status tracker
        return None
