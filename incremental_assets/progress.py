"""Log Spark's progress while a long job runs, so a long read isn't a silent wait."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession


@contextmanager
def spark_progress(
    spark: SparkSession, log: Callable[[str], None], every: float = 15.0
) -> Iterator[None]:
    """Every `every` seconds while the block runs, log each active stage's finished tasks.

    Needs the classic SparkContext; over Spark Connect (no status tracker) it logs nothing.
    """
    try:
        tracker = spark.sparkContext.statusTracker()
    except Exception:
        yield
        return
    done = threading.Event()

    def report() -> None:
        while not done.wait(every):
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
