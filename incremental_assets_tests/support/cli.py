"""Runs in a subprocess, as a user runs them: the environment, `dagster asset materialize`, the
config it reads, and the materializations left in the instance on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from incremental_assets.metadata import TableMetadata
from incremental_assets_tests.support.spark import TEST_SPARK_SETTINGS

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def cli_env(config: Path, home: Path | None, **extra: str) -> dict[str, str]:
    """The environment a user sets up per the README: the config file, the module, DAGSTER_HOME."""
    env = {
        **os.environ,
        "INCREMENTAL_ASSETS_CONFIG": str(config),
        "DAGSTER_MODULE_NAME": "incremental_assets",
        **extra,
    }
    env.pop("DAGSTER_HOME", None)
    if home is not None:
        home.mkdir(exist_ok=True)
        env["DAGSTER_HOME"] = str(home)
    return env


def start_cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`dagster asset materialize` in its own process group, so a test can kill all of it."""
    return subprocess.Popen(
        [DAGSTER, "asset", "materialize", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    process = start_cli(cwd, env, *args)
    stdout, stderr = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_command(
    cwd: Path, env: dict[str, str], *args: str, python_m: bool = False
) -> subprocess.CompletedProcess[str]:
    """The installed `incremental-assets` command, or `python -m incremental_assets`."""
    program = (
        [sys.executable, "-m", "incremental_assets"]
        if python_m
        else [str(Path(sys.executable).with_name("incremental-assets"))]
    )
    return subprocess.run(
        [*program, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def materializations(home: Path, table: str) -> list[dict[str, Any]]:
    """Every materialization of a table in the instance at `home`, oldest first."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey(table), limit=1000).records
        result = []
        for record in reversed(records):
            materialization = record.asset_materialization
            assert materialization is not None
            result.append(TableMetadata.extract(materialization.metadata).values())
        return result


def write_cli_config(
    directory: Path,
    sources: dict[str, Any],
    tables: list[dict[str, Any]],
    remote: str | None = None,
    **lake: Any,
) -> Path:
    """A config for runs in a subprocess: a small local Spark or a Connect server; the lake in
    `directory`, plain Parquet unless `lake` names another `format`."""
    spark: dict[str, Any] = {"master": "local[2]", "conf": dict(TEST_SPARK_SETTINGS)}
    if remote:
        spark = {"remote": remote, "conf": {"spark.sql.shuffle.partitions": "2"}}
    config = {
        "spark": spark,
        "lake": {"path": str(directory / "lake"), "format": "parquet", **lake},
        "sources": sources,
        "tables": tables,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def paused_run(
    cwd: Path,
    config: Path,
    home: Path,
    point: str,
    timeout: float = 240,
    full_refresh: bool = False,
) -> tuple[subprocess.Popen[str], Path]:
    """`dagster asset materialize --select orders` (a full refresh if asked), held at the pause
    point `point` (the product's `pause_points`): the process, and the marker file whose
    removal lets it go on."""
    from incremental_assets.pause_points import ENV as PAUSE_AT

    marker = cwd / f"paused-{point}"
    args = ["--select", "orders"]
    if full_refresh:
        config_json = {"ops": {"orders": {"config": {"full_refresh": True}}}}
        args += ["--config-json", json.dumps(config_json)]
    process = start_cli(cwd, cli_env(config, home, **{PAUSE_AT: f"{point}:{marker}"}), *args)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            stderr = process.communicate()[1]
            said = [line for line in stderr.splitlines() if "Table 'orders'" in line]
            raise AssertionError(f"the run never paused at {point}: {said or stderr[-3000:]}")
        time.sleep(0.2)
    return process, marker
