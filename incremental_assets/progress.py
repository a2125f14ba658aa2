"""What Spark does during a run: its progress while the run goes on (so a long read isn't a
silent wait), and how many jobs and stages the run took (`spark_jobs`, `spark_stages`), so that
a new pass over the data shows in the metadata and in a test.

Progress comes from the session's status store for a local or cluster session, and from the
progress its server sends the client for a Spark Connect one; `progress_lines.py` words it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from incremental_assets.errors import ConfigError
from incremental_assets.progress_lines import (
    PLANNING,
    FirstSeen,
    Snapshot,
    StageTally,
    progress_line,
    seen_first,
)
from incremental_assets.spark_api import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.shell.progress import ProgressHandler
    from pyspark.sql.connect.shell.progress import StageInfo as ConnectStageInfo

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


_CURRENT: ContextVar[RunProgress | None] = ContextVar("run_progress", default=None)
# Spark Connect servers report a query's progress every 2 s unless told otherwise.
_CONNECT_REPORT_INTERVAL = "spark.connect.progress.reportInterval"
_CONNECT_DEFAULT_SECONDS = 2.0


def phase(name: str) -> None:
    """The run's phase from now on (`progress_lines.STAGING`, ...), as its progress lines name
    it; nothing where no progress is reported."""
    current = _CURRENT.get()
    if current is not None:
        current.enter(name)


class RunProgress:
    """A run's progress lines: every interval, once a session is watched, one line of what its
    Spark stages did (`progress_lines.progress_line`). A run shorter than the interval says
    nothing."""

    def __init__(self, table: str, log: Callable[[str], None], interval: float) -> None:
        self._table, self._log, self._interval = table, log, interval
        self._phase = (PLANNING, time.monotonic())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe: _LocalProbe | _ConnectProbe | None = None

    def enter(self, name: str) -> None:
        self._phase = (name, time.monotonic())

    def watch(self, spark: SparkSession) -> SparkSession:
        """Report on `spark`'s stages from now on; the session, for the caller to use."""
        if self._thread is None:
            try:
                self._probe = _probe_for(spark, self._interval)
            except Exception:  # a session gone already: the run's next call says so, in its words
                return spark
            self._thread = threading.Thread(target=self._report, name="progress", daemon=True)
            self._thread.start()
        return spark

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._probe is not None:
            self._probe.close()

    def _report(self) -> None:
        seen: dict[int, FirstSeen] = {}
        while not self._stop.wait(self._interval) and self._probe is not None:
            try:
                snapshot = self._probe.snapshot()
            except Exception:  # a session stopping under the run: its failure says so, not this
                continue
            now = time.monotonic()
            seen = seen_first(snapshot, seen, now)
            name, since = self._phase
            self._log(progress_line(self._table, name, now - since, snapshot, seen, now))


@contextmanager
def run_progress(
    table: str, log: Callable[[str], None], every: float | None = None
) -> Iterator[RunProgress]:
    """A run's progress reporting, every `every` seconds (default: `progress_interval()`) once
    it watches a session; `phase()` inside the block names the run's phase in its lines."""
    progress = RunProgress(table, log, progress_interval() if every is None else every)
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)
        progress.close()


def _probe_for(spark: SparkSession, interval: float) -> _LocalProbe | _ConnectProbe:
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return _ConnectProbe(cast("ConnectSession", spark), interval)
    return _LocalProbe(spark)


class _LocalProbe:
    """A local or cluster session's stages, from its status store: those of the jobs started
    since the probe was made (a session serves one run at a time, see `spark_work`)."""

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self._tracker = context.statusTracker()
        self._store = context._jsc.sc().statusStore()
        self._before = set(self._tracker.getJobIdsForGroup())
        self._final: dict[int, StageTally] = {}

    def snapshot(self) -> Snapshot:
        stages, running = [], 0
        for stage_id in sorted(self._stage_ids()):
            tally = self._final.get(stage_id)
            if tally is None:
                data = self._stage(stage_id)
                if data is None:
                    continue
                tally = _local_tally(data)
                running += 0 if tally.done else data.numActiveTasks()
                if tally.done:
                    self._final[stage_id] = tally
            stages.append(tally)
        return Snapshot(tuple(stages), running)

    def close(self) -> None:
        pass

    def _stage_ids(self) -> set[int]:
        jobs = set(self._tracker.getJobIdsForGroup()) - self._before
        infos = [self._tracker.getJobInfo(job) for job in jobs]
        return {stage for info in infos if info is not None for stage in info.stageIds}

    def _stage(self, stage_id: int) -> Any | None:
        """The stage's latest attempt (py4j's StageData); None for one never submitted."""
        try:
            return self._store.lastStageAttempt(stage_id)
        except Exception:  # py4j's NoSuchElementException: a stage skipped or not yet started
            return None


def _local_tally(data: Any) -> StageTally:
    return StageTally(
        stage_id=data.stageId(),
        tasks=data.numTasks(),
        tasks_done=data.numCompleteTasks(),
        done=data.status().toString() in ("COMPLETE", "FAILED", "SKIPPED"),
        name=str(data.name()).split(" at ")[0],
        rows_read=data.inputRecords(),
        bytes_read=data.inputBytes(),
        rows_written=data.outputRecords(),
        bytes_written=data.outputBytes(),
    )


class _ConnectProbe:
    """A Spark Connect session's stages, as its server reports them to the client's progress
    handlers while a query runs: tasks and bytes read (no rows, nothing written)."""

    def __init__(self, spark: ConnectSession, interval: float) -> None:
        self._spark = spark
        self._lock = threading.Lock()
        self._stages: dict[int, StageTally] = {}
        self._running: dict[str | None, int] = {}
        self._handler = cast("ProgressHandler", self._update)
        # Asked only for an interval shorter than the server's: the default costs no call.
        shorter = interval < _CONNECT_DEFAULT_SECONDS
        if shorter and spark.conf.isModifiable(_CONNECT_REPORT_INTERVAL):
            spark.conf.set(_CONNECT_REPORT_INTERVAL, f"{int(interval * 1000)}ms")
        spark.registerProgressHandler(self._handler)

    def _update(
        self,
        stages: Iterable[ConnectStageInfo] | None,
        inflight_tasks: int,
        operation_id: str | None,
        done: bool,
    ) -> None:
        with self._lock:
            for stage in stages or ():
                self._stages[stage.stage_id] = StageTally(
                    stage_id=stage.stage_id,
                    tasks=stage.num_tasks,
                    tasks_done=stage.num_completed_tasks,
                    done=stage.done or done,
                    bytes_read=stage.num_bytes_read,
                )
            self._running[operation_id] = 0 if done else inflight_tasks

    def snapshot(self) -> Snapshot:
        with self._lock:
            stages = tuple(self._stages[key] for key in sorted(self._stages))
            return Snapshot(stages, sum(self._running.values()))

    def close(self) -> None:
        self._spark.removeProgressHandler(self._handler)


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
