"""The same asset, unchanged, on engines other than local Spark.

* a Spark standalone cluster (a master and two workers started from the pyspark distribution);
* a Spark Connect server (no JVM in the process that runs Dagster).

The third place, an instance stored in PostgreSQL, is test_postgres_instance.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    run_cli,
    start_cli,
    write_cli_config,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import read_lake, rows_by
from incremental_assets_tests.support.spark import master_state, standalone_cluster

ORDERS = "CREATE TABLE orders (id bigint PRIMARY KEY, v text, updated_at timestamptz NOT NULL)"
ROWS = (
    "INSERT INTO orders SELECT i, 'v', TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
    "FROM generate_series({}, {}) i"
)


def _table(pg: Schema) -> dict[str, object]:
    return {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "merge",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }


def test_a_standalone_cluster_runs_the_load_on_its_workers(tmp_path: Path, pg: Schema) -> None:
    pg.execute(ORDERS, ROWS.format(1, 2000))
    with standalone_cluster(workers=2) as (master, web):
        config = write_cli_config(
            tmp_path, {"shop": pg.source(rows_per_partition=500)}, [_table(pg)]
        )
        text = config.read_text().replace("master: local[2]", f"master: {master}")
        config.write_text(text.replace("spark.driver.memory: 1g", "spark.executor.memory: 512m"))
        env = cli_env(config, tmp_path / "home")

        run = run_cli(tmp_path, env, "--select", "orders")
        applications = master_state(web).get("completedapps", [])

    assert run.returncode == 0, run.stderr[-2000:]
    assert len(applications) == 1
    assert all(app["cores"] >= 2 for app in applications)
    runs = materializations(tmp_path / "home", "orders")
    assert [r["rows_extracted"] for r in runs] == [2000]
    assert rows_by(read_lake(tmp_path / "lake", "orders"), ["id"]) == [(i,) for i in range(1, 2001)]


@pytest.mark.xdist_group("connect")
def test_over_spark_connect_the_dagster_process_starts_no_jvm(
    tmp_path: Path, pg: Schema, connect: str
) -> None:
    pg.execute(ORDERS, ROWS.format(1, 300))
    env = cli_env(
        write_cli_config(tmp_path, {"shop": pg.source()}, [_table(pg)], remote=connect),
        tmp_path / "home",
    )

    process = start_cli(tmp_path, env, "--select", "orders")
    seen_java = False
    while process.poll() is None:
        children = subprocess.run(
            ["ps", "-o", "comm=", "--ppid", str(process.pid)], capture_output=True, text=True
        )
        seen_java = seen_java or "java" in children.stdout
        time.sleep(0.2)
    _, stderr = process.communicate()

    assert process.returncode == 0, stderr[-2000:]
    assert not seen_java
    assert materializations(tmp_path / "home", "orders")[-1]["rows_written"] == 300
    assert rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])[-1] == (300,)
