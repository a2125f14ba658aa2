"""Log Spark's progress while a long job runs, so a long read isn't a silent wait."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from incremental_assets.errors import ConfigError

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
                        f"{stage.numCompletedTasks}/{stage.numTasks} tasks done, {stage.numActiveTasks} running"
                    )

    thread = threading.Thread(target=report, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
