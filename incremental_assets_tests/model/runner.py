"""Running the real asset: in this process, as `dagster asset materialize` (to the end, or killed
part way), and the `incremental-assets cursor` commands; and an Iceberg table's maintenance as a
job of its own would run it between runs. One Dagster home and one lake at a time per example,
shared by all; the machine may rewrite the table's settings (and the lake's), point the config at
another lake, or start over with a new, empty Dagster home.

Every home holds the project's shipped dagster.yaml (`SHIPPED_INSTANCE`): its pools give each
table's runs one slot, which runs in this process claim as the command's do. A run that hasn't
ended after `timeout` seconds (waiting for a slot a killed run never gave back, say) is stopped
and reported as timed out: the command's process group killed; a run in this process abandoned
in its thread, which Dagster keeps waiting."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from pyspark.sql import SparkSession

from incremental_assets import cli
from incremental_assets.config import Project, load_project
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.maintenance import Policy, Target, due, maintain
from incremental_assets.lake.iceberg.table import now
from incremental_assets.pause_points import ENV as PAUSE_AT
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.table import TABLE
from incremental_assets_tests.support.cli import cli_env, start_cli
from incremental_assets_tests.support.project import (
    Run,
    latest_metadata,
    materialize,
    new_instance_home,
)
from incremental_assets_tests.support.spark import TEST_SPARK_CONF

PAUSE_POINTS = ("staged", "mid-commit", "committed")
# The instance settings the project ships (one run per table's pool), copied into every home.
SHIPPED_INSTANCE = Path(__file__).resolve().parents[2] / "dagster.yaml"
RUN_TIMEOUT = 240.0  # seconds a run may take before it counts as hung


@dataclass(frozen=True)
class Outcome:
    success: bool
    metadata: dict[str, Any]
    failure: str | None = None
    killed: bool = False  # stopped at its pause point with SIGKILL
    log: str = ""  # the end of the run's log
    timed_out: bool = False  # still running after the runner's timeout, and stopped

    def describe(self) -> str:
        return f"{self.failure or '(no message)'}\n--- the end of the run's log:\n{self.log}"


class Runner:
    """Runs one table of one example; `directory` holds its config, lakes and Dagster homes."""

    # Lake settings every example's config gets (a family's `lake.merge_tuning`, say).
    lake_settings: dict[str, Any] = {}  # noqa: RUF012 - replaced whole, never mutated

    def __init__(
        self,
        directory: Path,
        source: dict[str, Any],
        table: dict[str, Any],
        spark_resource: IncrementalSparkResource,
        connect: str | None,
        lake_format: str = "parquet",
        lake_options: dict[str, Any] | None = None,
        instance: Path | None = SHIPPED_INSTANCE,
        timeout: float = RUN_TIMEOUT,
    ) -> None:
        """`instance`: the dagster.yaml every Dagster home gets (None: none, pools off);
        `timeout`: how long a run may take before it is stopped as hung."""
        self.directory = directory
        self.directory.mkdir(parents=True)
        self.instance = instance
        self.timeout = timeout
        self.homes = 0
        self.home = self.new_home()
        self.lakes = 0
        self.lake = self._new_lake()
        self.lake_format = lake_format
        self.spark_resource = spark_resource
        self.config_path = directory / "incremental_assets.yaml"
        spark: dict[str, Any] = {"master": "local[2]", "conf": dict(TEST_SPARK_CONF)}
        if connect:
            spark = {"remote": connect, "conf": {"spark.sql.shuffle.partitions": "2"}}
        self.config: dict[str, Any] = {"spark": spark, "sources": {"db": source}}
        # The example's own `lake:` settings (`merge_writes`, how long snapshots are kept).
        self.lake_options: dict[str, Any] = dict(lake_options or {})
        self.configure(table)

    def configure(self, table: dict[str, Any], lake_options: dict[str, Any] | None = None) -> None:
        """Write the config with this table entry (the settings the next run runs under), and
        these `lake:` settings (None: those it had)."""
        if lake_options is not None:
            self.lake_options = lake_options
        lake = {
            "path": str(self.lake),
            "format": self.lake_format,
            **self.lake_settings,
            **self.lake_options,
        }
        config = {**self.config, "lake": lake, "tables": [table]}
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.project: Project = load_project(self.config_path)
        self.table = table

    def move_lake(self) -> Path:
        """Point the config at an empty place for the lake (`lake.path` changed); the old lake
        stays where it was."""
        self.lake = self._new_lake()
        self.configure(self.table)
        return self.lake

    def new_home(self) -> Path:
        """A new, empty Dagster home for every run from now on: no stored cursor, no history."""
        self.homes += 1
        self.home = new_instance_home(self.directory / f"dagster_home_{self.homes}", self.instance)
        return self.home

    def _new_lake(self) -> Path:
        self.lakes += 1
        return self.directory / f"lake_{self.lakes}"

    def materializations(self) -> int:
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            records = instance.fetch_materializations(dg.AssetKey(TABLE), limit=1000).records
            return len(records)

    def recorded_cursor(self) -> Any:
        return self.latest_metadata().get("cursor")

    def stored_cursor(self) -> str | None:
        """The cursor the next run starts from, as recorded: the last materialization's, or that
        of a `cursor set|reset` recorded after it (an observation)."""
        key = dg.AssetKey(TABLE)
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            records = [
                *instance.fetch_materializations(key, limit=1).records,
                *instance.fetch_observations(key, limit=1).records,
            ]
        if not records:
            return None
        event = max(records, key=lambda r: r.storage_id).asset_event
        assert event is not None
        cursor = event.metadata.get("cursor")
        return None if cursor is None else cursor.value  # type: ignore[return-value]

    def latest_metadata(self) -> dict[str, Any]:
        """The metadata of the last materialization or cursor command ({} if none)."""
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            return latest_metadata(instance, TABLE)

    def run(self, full_refresh: bool = False) -> Outcome:
        """The asset materialized in this process (in a thread of its own, so a run that never
        ends is reported after `timeout` seconds rather than waited for)."""
        log = io.StringIO()  # Dagster's console log: kept for a failure, not printed
        results: list[Run] = []
        failures: list[BaseException] = []

        def materialize_here() -> None:
            try:
                _activate(self.spark_resource.spark_session)
                with dg.DagsterInstance.from_config(str(self.home)) as instance:
                    results.append(
                        materialize(
                            self.project, TABLE, instance, self.spark_resource, full_refresh
                        )
                    )
            except BaseException as exc:  # reported by the caller's thread
                failures.append(exc)

        thread = threading.Thread(target=materialize_here, name="model-run", daemon=True)
        with contextlib.redirect_stderr(log):
            thread.start()
            thread.join(self.timeout)
        if failures:
            raise failures[0]
        if not results:
            return self._hung("in this process", log.getvalue())
        result = results[0]
        return Outcome(result.success, result.metadata, result.failure, log=log.getvalue()[-3000:])

    def _hung(self, where: str, log: str) -> Outcome:
        return Outcome(
            False,
            {},
            f"the run ({where}) had not ended after {self.timeout:.0f} s, and was stopped",
            log=log[-3000:],
            timed_out=True,
        )

    def start(self, full_refresh: bool = False, **env: str) -> subprocess.Popen[str]:
        """`dagster asset materialize` of the table, as a user runs it from a shell."""
        args = ["--select", TABLE]
        if full_refresh:
            config = {"ops": {TABLE: {"config": {"full_refresh": True}}}}
            args += ["--config-json", json.dumps(config)]
        return start_cli(self.directory, cli_env(self.config_path, self.home, **env), *args)

    def finish(self, process: subprocess.Popen[str], before: int) -> Outcome:
        """Wait for a run started with `start` (killed after `timeout` seconds); `before` is how
        many runs were recorded then."""
        try:
            _, stderr = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _, stderr = self.stop(process)
            return self._hung("dagster asset materialize", stderr)
        if process.returncode != 0:
            return Outcome(False, {}, f"exit status {process.returncode}", log=stderr[-3000:])
        if self.materializations() != before + 1:
            return Outcome(False, {}, "the run finished but recorded nothing", log=stderr[-3000:])
        return Outcome(True, self.latest_metadata())

    @staticmethod
    def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
        """SIGKILL a run started with `start`, and every process it started: its output."""
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate(timeout=60)

    def killed_run(self, point: str, full_refresh: bool) -> Outcome:
        """A run killed with SIGKILL where it pauses at `point`.

        A run with nothing to commit never reaches some points and simply finishes: that is
        returned as the run it was.
        """
        marker = self.directory / f"paused-{time.monotonic_ns()}"
        before = self.materializations()
        process = self.start(full_refresh, **{PAUSE_AT: f"{point}:{marker}"})
        deadline = time.monotonic() + self.timeout
        while not marker.exists() and process.poll() is None:
            if time.monotonic() > deadline:
                _, stderr = self.stop(process)
                return self._hung(f"dagster asset materialize, to pause at {point}", stderr)
            time.sleep(0.1)
        if marker.exists():
            self.stop(process)
            return Outcome(False, {}, None, killed=True)
        return self.finish(process, before)

    def maintain(self, policy: Policy) -> str | None:
        """The Iceberg table's maintenance, as a job of its own runs it between runs (what
        `IcebergLake.maintain` does after a commit, with `policy`): the tasks due, under the
        table's lock, on this process's Spark session. What it did (None: nothing was due)."""
        lake = open_lake(self.project.lake, TABLE)
        assert isinstance(lake, IcebergLake), lake
        with lake.lock(TABLE, "model-maintenance", timedelta(minutes=5)):
            state = lake.state()
            at = now()
            tasks = due(state, policy, at) if state is not None else []
            if state is None or not tasks:
                return None
            target = Target(lake.catalog.name, lake.procedure_table(), lake.reference())
            spark = lake.session(self.spark_resource.spark_session)
            return maintain(spark, target, state, tasks, policy, at).describe()

    def cursor_command(self, *args: str) -> tuple[int, str]:
        """`incremental-assets cursor ...` in this process, with DAGSTER_HOME set while it runs."""
        out, err = io.StringIO(), io.StringIO()
        with (
            _environment(DAGSTER_HOME=str(self.home)),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = cli.main(
                ["--config", str(self.config_path), "cursor", *args, "--reason", "model"]
            )
        return code, out.getvalue() + err.getvalue()


def _activate(session: SparkSession) -> None:
    """The session made this thread's active one, as it is the main thread's: the run's copy of
    the resource then finds it, and leaves it running at the end (it stops a session it started
    itself, and the JVM keeps the active session per thread). PySpark has no public call for it:
    `getOrCreate` returns the existing session without making it active here."""
    if SparkSession.getActiveSession() is not None:
        return
    jvm: Any = session._jvm
    sessions = getattr(jvm, "org.apache.spark.sql.classic.SparkSession")
    sessions.setActiveSession(session._jsparkSession)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
