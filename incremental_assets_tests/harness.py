"""Helpers the tests share: write a project file, materialize a table, read the lake back."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as pads
import yaml

from incremental_assets.config import Project, load_project
from incremental_assets.factory import build_table_asset
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.postgres import PostgresServer


def write_project(directory: Path, config: Mapping[str, Any]) -> Project:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return load_project(path)


@dataclass
class Run:
    success: bool
    metadata: dict[str, Any]
    failure: str | None
    run_id: str


def materialize(
    project: Project,
    table: str,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    full_refresh: bool = False,
) -> Run:
    spec = project.table(table)
    asset = build_table_asset(project, spec, IncrementalAssetsTranslator(project.lake))
    op_name = "__".join(spec.asset_key_path)
    result = dg.materialize(
        [asset],
        instance=instance,
        resources={"spark": spark_resource},
        run_config={"ops": {op_name: {"config": {"full_refresh": full_refresh}}}},
        raise_on_error=False,
    )
    metadata: dict[str, Any] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
        metadata = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    failure = None
    for event in result.all_events:
        if event.is_step_failure:
            failure = event.step_failure_data.error.message  # type: ignore[union-attr]
    return Run(result.success, metadata, failure, result.run_id)


def latest_metadata(instance: dg.DagsterInstance, table: str) -> dict[str, Any]:
    event = instance.get_latest_materialization_event(dg.AssetKey(table))
    if event is None or event.asset_materialization is None:
        return {}
    return {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}


def read_lake(lake_dir: Path, table: str) -> pa.Table:
    """The table as any pyarrow user reads it."""
    return pads.dataset(str(lake_dir / table), partitioning="hive", format="parquet").to_table()


def rows_by(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    data = table.select(columns).to_pylist()
    return sorted(tuple(row[c] for c in columns) for row in data)


def lake_files(lake_dir: Path, table: str) -> list[str]:
    return sorted(p.name for p in (lake_dir / table).glob("part-*.parquet"))


@dataclass
class Schema:
    """A fresh PostgreSQL schema for one test."""

    server: PostgresServer
    name: str

    def execute(self, *statements: str, params: Any = None) -> None:
        with self.server.connect() as conn:
            conn.execute(f"SET search_path TO {self.name}")
            for statement in statements:
                conn.execute(statement, params)  # type: ignore[arg-type]

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with self.server.connect() as conn:
            conn.execute(f"SET search_path TO {self.name}")
            return conn.execute(sql).fetchall()  # type: ignore[arg-type]

    def source(self, **extra: Any) -> dict[str, Any]:
        return {
            "type": "jdbc",
            "url": self.server.jdbc_url,
            "user": self.server.user,
            "password": self.server.password,
            **extra,
        }


@contextmanager
def fresh_schema(server: PostgresServer) -> Iterator[Schema]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield Schema(server, name)
    finally:
        with server.connect() as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


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


def materializations(home: Path, table: str) -> list[dict[str, Any]]:
    """Every materialization of a table in the instance at `home`, oldest first."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(dg.AssetKey(table), limit=1000).records
        result = []
        for record in reversed(records):
            materialization = record.asset_materialization
            assert materialization is not None
            result.append({k: getattr(v, "value", v) for k, v in materialization.metadata.items()})
        return result


def write_cli_config(
    directory: Path,
    sources: dict[str, Any],
    tables: list[dict[str, Any]],
    remote: str | None = None,
    **lake: Any,
) -> Path:
    """A config for runs in a subprocess: a small local Spark or a Connect server; the lake in `directory`."""
    from incremental_assets_tests.conftest import TEST_SPARK_CONF
    from incremental_assets_tests.mariadb import MARIADB_JAR

    conf = {k: v for k, v in TEST_SPARK_CONF.items() if not k.startswith("spark.jars")}
    spark: dict[str, Any] = {"master": "local[2]", "conf": conf, "jars": [MARIADB_JAR]}
    if remote:
        spark = {"remote": remote, "conf": {"spark.sql.shuffle.partitions": "2"}}
    config = {
        "spark": spark,
        "lake": {"path": str(directory / "lake"), **lake},
        "sources": sources,
        "tables": tables,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
