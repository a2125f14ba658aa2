"""Running the real asset: in this process, as a `dagster asset materialize` killed part way, and
the `incremental-assets cursor` commands; and an Iceberg table's maintenance as a job of its own
would run it between runs. One Dagster home and one lake at a time per example, shared by all;
the machine may rewrite the table's settings (and the lake's), point the config at another lake,
or start over with a new, empty Dagster home."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

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
from incremental_assets_tests.support.project import latest_metadata, materialize
from incremental_assets_tests.support.spark import TEST_SPARK_CONF

PAUSE_POINTS = ("staged", "mid-commit", "committed")


@dataclass(frozen=True)
class Outcome:
    success: bool
    metadata: dict[str, Any]
    failure: str | None = None
    killed: bool = False  # stopped at its pause point with SIGKILL
    log: str = ""  # the end of the run's log

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
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True)
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
        home = self.directory / f"dagster_home_{self.homes}"
        home.mkdir()
        self.home = home
        return home

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
        log = io.StringIO()  # Dagster's console log: kept for a failure, not printed
        with (
            dg.DagsterInstance.from_config(str(self.home)) as instance,
            contextlib.redirect_stderr(log),
        ):
            result = materialize(self.project, TABLE, instance, self.spark_resource, full_refresh)
        return Outcome(result.success, result.metadata, result.failure, log=log.getvalue()[-3000:])

    def start(self, full_refresh: bool = False, **env: str) -> subprocess.Popen[str]:
        """`dagster asset materialize` of the table, as a user runs it from a shell."""
        args = ["--select", TABLE]
        if full_refresh:
            config = {"ops": {TABLE: {"config": {"full_refresh": True}}}}
            args += ["--config-json", json.dumps(config)]
        return start_cli(self.directory, cli_env(self.config_path, self.home, **env), *args)

    def finish(self, process: subprocess.Popen[str], before: int) -> Outcome:
        """Wait for a run started with `start`; `before` is how many runs were recorded then."""
        _, stderr = process.communicate(timeout=600)
        if process.returncode != 0:
            return Outcome(False, {}, f"exit status {process.returncode}", log=stderr[-3000:])
        if self.materializations() != before + 1:
            return Outcome(False, {}, "the run finished but recorded nothing", log=stderr[-3000:])
        return Outcome(True, self.latest_metadata())

    @staticmethod
    def stop(process: subprocess.Popen[str]) -> None:
        """SIGKILL a run started with `start`, and every process it started."""
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=60)

    def killed_run(self, point: str, full_refresh: bool) -> Outcome:
        """A run killed with SIGKILL where it pauses at `point`.

        A run with nothing to commit never reaches some points and simply finishes: that is
        returned as the run it was.
        """
        marker = self.directory / f"paused-{time.monotonic_ns()}"
        before = self.materializations()
        process = self.start(full_refresh, **{PAUSE_AT: f"{point}:{marker}"})
        deadline = time.monotonic() + 300
        while not marker.exists() and process.poll() is None:
            if time.monotonic() > deadline:
                self.stop(process)
                raise TimeoutError(f"the run neither paused at {point} nor ended")
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
