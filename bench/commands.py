"""The commands a user runs, each a fresh process timed from outside, in a project of its own.

`timed` is the wall clock around one process: from just before it is launched until it has
exited. Anything it left behind (a local Spark session's JVM still shutting down) is waited for
after the clock stops, so that it doesn't slow the next command; a command that fails stops the
benchmark with its output.

`Project` is what a user sets up: a folder with its own `incremental_assets.yaml` and its own
DAGSTER_HOME (a copy of the repository's dagster.yaml: SQLite storage, telemetry off), and the
environment the README names (INCREMENTAL_ASSETS_CONFIG, DAGSTER_HOME, DAGSTER_MODULE_NAME). It
runs `dagster asset materialize`, `incremental-assets engine start|stop`, the no-op asset and the
peers' one-run processes, and reads what each materialization recorded.

Its lake format is named (`lake: {format: parquet}` unless told otherwise). A second project on
the other format can share the first one's DAGSTER_HOME, and so its shared engine, with its
asset keys under a `key_prefix` so that the two projects' cursors stay apart.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.data import SCHEMA
from bench.recorded import recorded

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAGSTER = str(BIN / "dagster")
CLI = str(BIN / "incremental-assets")
TABLES = ("orders", "orders_merge")


@dataclass(frozen=True)
class Timed:
    wall: float
    stdout: str


def timed(command: list[str], cwd: Path, env: Mapping[str, str], timeout: float = 3600) -> Timed:
    """Run `command` to its end; its wall time from launch to exit, and what it printed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    wall = time.perf_counter() - started
    _wait_for_leftovers(process.pid)
    if process.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(command)}` failed ({process.returncode}):\n"
            f"{stdout[-2000:]}\n{stderr[-4000:]}"
        )
    return Timed(wall, stdout)


def _wait_for_leftovers(group: int, patience: float = 120) -> None:
    """Wait until no process of the command's session remains; kill what outstays `patience`."""
    deadline = time.monotonic() + patience
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            os.killpg(group, signal.SIGKILL)
            return
        time.sleep(0.1)


@dataclass
class Project:
    """A user's project on the benchmark's source: two tables, one lake, one Dagster home."""

    folder: Path
    pg_url: str
    key_prefix: tuple[str, ...] = ()
    shared_home: Path | None = None  # another project's DAGSTER_HOME (and engine)
    _last_runs: dict[str, str | None] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.folder / "incremental_assets.yaml"

    @property
    def home(self) -> Path:
        return self.shared_home or self.folder / "dagster_home"

    @classmethod
    def create(
        cls,
        folder: Path,
        pg_url: str,
        jdbc: dict[str, str],
        lake_format: str = "parquet",
        sharing: Project | None = None,
        key_prefix: tuple[str, ...] = (),
    ) -> Project:
        """Write the configuration and the Dagster home (or use `sharing`'s); create the
        instance's storage."""
        import dagster as dg

        common = {
            "source": "pg",
            "table": f"{SCHEMA}.orders",
            "cursor": "updated_at",
            "primary_key": ["id"],
        }
        config = {
            "spark": {
                "master": "local[*]",
                "engine": "shared",
                "conf": {"spark.driver.memory": "4g", "spark.ui.enabled": "false"},
            },
            "lake": {"path": str(folder / "lake"), "format": lake_format},
            "sources": {"pg": {"type": "jdbc", **jdbc}},
            "tables": [
                {"name": "orders", "mode": "append", **common},
                {"name": "orders_merge", "mode": "merge", **common},
            ],
        }
        if key_prefix:
            config = {"key_prefix": list(key_prefix), **config}
        project = cls(folder, pg_url, key_prefix, sharing.home if sharing else None)
        folder.mkdir(parents=True, exist_ok=True)
        project.config.write_text(yaml.safe_dump(config, sort_keys=False))
        if sharing is None:
            project.home.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "dagster.yaml", project.home / "dagster.yaml")
            # A brand-new DAGSTER_HOME creates its SQLite storage on first use: do it before timing.
            dg.DagsterInstance.from_config(str(project.home)).dispose()
        return project

    def env(self, module: str = "incremental_assets") -> dict[str, str]:
        """The environment of every command: the README's variables; `bench` importable."""
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return {
            **os.environ,
            "INCREMENTAL_ASSETS_CONFIG": str(self.config),
            "DAGSTER_HOME": str(self.home),
            "DAGSTER_MODULE_NAME": module,
            "PYTHONPATH": path,
        }

    def materialize(self, *tables: str) -> dict[str, Any]:
        """`dagster asset materialize --select <tables>`: its wall time and, from the instance,
        what the run recorded (`bench/recorded.py`): rows read and engine seconds summed over
        the tables, the rest the first table's."""
        keys = ["/".join([*self.key_prefix, table]) for table in tables]
        command = [DAGSTER, "asset", "materialize", "--select", ",".join(keys)]
        run = timed(command, self.folder, self.env())
        runs = [recorded(self._recorded(table)) for table in tables]
        first = runs[0]
        return {
            **first,
            "wall": run.wall,
            "rows": sum(r["rows"] or 0 for r in runs),  # summed over the tables
            "engine_seconds": sum(r["engine_seconds"] for r in runs),
        }

    def noop(self) -> dict[str, Any]:
        """The same command on bench/noop_defs.py's asset that does nothing: Dagster's floor."""
        run = timed(
            [DAGSTER, "asset", "materialize", "--select", "noop"],
            self.folder,
            self.env("bench.noop_defs"),
        )
        return {"wall": run.wall, "rows": None}

    def engine(self, action: str) -> dict[str, Any]:
        """`incremental-assets engine start|stop`: start returns once the engine takes sessions."""
        run = timed([CLI, "engine", action], self.folder, self.env())
        return {"wall": run.wall, "rows": None, "output": run.stdout.strip()}

    def engine_up(self) -> bool:
        from incremental_assets.engine import running_engine

        return running_engine(self.home) is not None

    def peer(self, name: str, since: str) -> dict[str, Any]:
        """One incremental run of a peer in a fresh `python -m bench.fresh_peer` process."""
        command = [sys.executable, "-m", "bench.fresh_peer", name, str(self.folder / "peers")]
        run = timed([*command, self.pg_url, since], self.folder, self.env())
        line = next(x for x in reversed(run.stdout.splitlines()) if x.startswith("{"))
        return {"wall": run.wall, **json.loads(line)}

    def _recorded(self, table: str) -> Mapping[str, Any]:
        """The metadata of the table's newest materialization; it must be a new one."""
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            key = dg.AssetKey([*self.key_prefix, table])
            records = instance.fetch_materializations(key, limit=1).records
        if not records or records[0].run_id == self._last_runs.get(table):
            raise RuntimeError(f"the run recorded no new materialization of {table}")
        self._last_runs[table] = records[0].run_id
        materialization = records[0].asset_materialization
        assert materialization is not None
        return materialization.metadata
