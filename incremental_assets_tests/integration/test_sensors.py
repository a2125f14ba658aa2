"""Source-change sensors against real PostgreSQL and real files, with no JVM."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.sensors import evaluate
from incremental_assets_tests.harness import Schema, materialize, write_project


def _project(tmp_path: Path, pg: Schema, **table: Any) -> Any:
    entry = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "append",
        "transaction_cap": False,
        **table,
    }
    return write_project(
        tmp_path,
        {
            "lake": {"path": str(tmp_path / "lake")},
            "sources": {"shop": pg.source()},
            "tables": [entry],
        },
    )


def _requested(result: dg.SensorResult | dg.SkipReason) -> str | None:
    if isinstance(result, dg.SkipReason):
        return None
    (request,) = result.run_requests or []
    return request.run_key


def test_a_run_is_requested_only_when_rows_pass_the_stored_cursor(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, 10), (2, 20)")
    project = _project(tmp_path, pg, cursor="at")
    table, key = project.table("orders"), dg.AssetKey("orders")

    first = _requested(evaluate(instance, table, key, None))
    assert first == "orders:20"  # never loaded: ask for the first run
    assert materialize(project, "orders", instance, spark_resource).success
    assert _requested(evaluate(instance, table, key, first)) is None  # nothing past cursor 20

    pg.execute("INSERT INTO orders VALUES (3, 30)")
    second = _requested(evaluate(instance, table, key, first))
    assert second == "orders:30"
    # The same new rows seen by the next tick don't launch a second run.
    assert _requested(evaluate(instance, table, key, second)) is None


def test_a_table_without_a_cursor_is_watched_through_its_change_counters(
    tmp_path: Path, pg: Schema, instance: dg.DagsterInstance
) -> None:
    pg.execute("CREATE TABLE orders (code text PRIMARY KEY)")
    pg.execute("INSERT INTO orders VALUES ('a')")
    project = _project(tmp_path, pg, mode="full_refresh")
    table, key = project.table("orders"), dg.AssetKey("orders")
    pg.execute("SELECT pg_stat_force_next_flush()")

    marker = _requested(evaluate(instance, table, key, None))
    assert _requested(evaluate(instance, table, key, marker)) is None
    pg.execute("UPDATE orders SET code = 'b'")
    pg.execute("SELECT pg_stat_force_next_flush()")
    assert _requested(evaluate(instance, table, key, marker)) not in (None, marker)


def test_a_files_source_is_watched_through_modification_times(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing = tmp_path / "landing" / "events"
    landing.mkdir(parents=True)
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"drop": {"type": "files", "path": str(tmp_path / "landing")}},
        "tables": [{"name": "events", "source": "drop", "table": "events", "cursor": "at"}],
    }
    table, key = write_project(tmp_path, config).table("events"), dg.AssetKey("events")
    assert _requested(evaluate(instance, table, key, None)) is None  # an empty folder
    pq.write_table(pa.table({"at": [1]}), landing / "a.parquet")
    marker = _requested(evaluate(instance, table, key, None))
    assert marker is not None
    assert _requested(evaluate(instance, table, key, marker)) is None
    pq.write_table(pa.table({"at": [2]}), landing / "b.parquet")
    assert _requested(evaluate(instance, table, key, marker)) not in (None, marker)


def test_a_tick_starts_no_jvm(tmp_path: Path, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, 10)")
    config = tmp_path / "incremental_assets.yaml"
    _project(tmp_path, pg, cursor="at")
    script = textwrap.dedent(
        f"""
        import dagster as dg
        from pyspark import SparkContext
        from incremental_assets.config import load_project
        from incremental_assets.definitions import build_definitions
        defs = build_definitions(load_project({str(config)!r}))
        sensor = defs.resolve_sensor_def("orders_source_sensor")
        with dg.instance_for_test() as instance:
            result = sensor(dg.build_sensor_context(instance=instance))
        assert result.run_requests[0].run_key == "orders:10", result
        assert SparkContext._gateway is None, "a JVM was started"
        print("no jvm")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no jvm" in done.stdout
