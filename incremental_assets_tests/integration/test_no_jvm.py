"""A run with nothing new starts no JVM; a run with work does.

Seen from outside: `dagster asset materialize` runs with SPARK_HOME pointing at the pyspark
distribution with one change, a `bin/spark-submit` that notes each launch in a file before it
starts the JVM. In process (where the suite's own JVM already runs): the Spark jobs the session
ran during the materialization.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    run_cli,
    write_cli_config,
)
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import read_lake, rows_by

TABLE = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text, "
    "updated_at timestamptz NOT NULL DEFAULT now())"
)
DB_TABLE = "CREATE TABLE orders (id bigint PRIMARY KEY, note {text}, updated_at {tstz_default})"
ROWS = (
    "INSERT INTO orders (id, note, updated_at) SELECT i, 'old', "
    "TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 minute' FROM generate_series(1, 5) i"
)


def _observed_spark_home(root: Path) -> tuple[Path, Path]:
    """A SPARK_HOME whose spark-submit notes each launch in the returned file, then runs Spark's."""
    real = Path(pyspark.__file__).parent
    home, launches = root / "spark_home", root / "jvm_launches"
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for entry in (real / "bin").iterdir():
        if entry.name != "spark-submit":
            (home / "bin" / entry.name).symlink_to(entry)
    submit = home / "bin" / "spark-submit"
    submit.write_text(
        f'#!/usr/bin/env bash\necho launched >> "{launches}"\nexec "{real}/bin/spark-submit" "$@"\n'
    )
    submit.chmod(submit.stat().st_mode | stat.S_IEXEC)
    return home, launches


def _launches(launches: Path) -> int:
    return len(launches.read_text().splitlines()) if launches.exists() else 0


def test_a_run_starts_spark_only_when_there_is_work(
    tmp_path: Path, db: SourceDb, request: pytest.FixtureRequest
) -> None:
    """On PostgreSQL in fresh `dagster asset materialize` processes, counting JVM launches; on
    MariaDB in this process (its JVM is up already), counting the Spark jobs each run starts.
    Whether a run needs Spark is decided by the same code for both, over psycopg or PyMySQL."""
    db.execute(DB_TABLE)
    db.insert("orders", [(i, "old", f"2025-01-01 00:0{i}:00") for i in range(1, 6)])
    table = {"mode": "append", "cursor": "updated_at", "primary_key": ["id"]}
    run = (
        _fresh_process(tmp_path, db, table)
        if db.kind == "postgres"
        else _in_process(request, db, table)
    )
    runs = [run()]  # the first load
    runs.append(run())  # nothing new
    db.execute(
        "INSERT INTO orders (id, note, updated_at) VALUES (6, 'tied', '2025-01-01 00:05:00')"
    )
    runs.append(run())  # a new row tied with the cursor
    late = db.connect(autocommit=False)
    with closing(late.cursor()) as cursor:
        cursor.execute(f"INSERT INTO {db.qualified('orders')} (id, note) VALUES (7, 'late')")
    runs.append(run())  # a transaction open across the run: nothing a run could load
    late.commit()
    late.close()
    db.outlast_cap_margin()
    runs.append(run())  # the late row, committed

    assert [sparked for sparked, _ in runs] == [True, False, True, False, True]
    assert [m["rows_written"] for _, m in runs] == [5, 0, 1, 0, 1]
    assert runs[1][1]["spark"] == runs[3][1]["spark"] == "not started (nothing new)"
    assert runs[1][1]["cursor"] == runs[0][1]["cursor"]
    ids = [r[0] for r in rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])]
    assert ids == [1, 2, 3, 4, 5, 6, 7]


# One run of the table: whether it used Spark, and its materialization's metadata.
Runner = Callable[[], tuple[bool, dict[str, Any]]]


def _fresh_process(tmp_path: Path, db: SourceDb, table: dict[str, Any]) -> Runner:
    spec = {"name": "orders", "source": "shop", "table": db.qualified("orders"), **table}
    config = write_cli_config(tmp_path, {"shop": db.source()}, [spec])
    spark_home, launches = _observed_spark_home(tmp_path)
    env = cli_env(config, tmp_path / "home", SPARK_HOME=str(spark_home))

    def run() -> tuple[bool, dict[str, Any]]:
        before = _launches(launches)
        done = run_cli(tmp_path, env, "--select", "orders")
        assert done.returncode == 0, done.stderr[-3000:]
        return _launches(launches) > before, materializations(tmp_path / "home", "orders")[-1]

    return run


def _in_process(request: pytest.FixtureRequest, db: SourceDb, table: dict[str, Any]) -> Runner:
    loads: Loads = request.getfixturevalue("loads")
    loads.configure(db, "orders", **table)
    spark = request.getfixturevalue("spark")

    def run() -> tuple[bool, dict[str, Any]]:
        before = _jobs(spark)
        done = loads.run()
        assert done.success, done.failure
        return _jobs(spark) > before, done.metadata

    return run


def _jobs(spark: SparkSession) -> int:
    """The newest Spark job's id (-1: none yet). Not a count of the jobs listed: Spark lists only
    the newest `spark.ui.retainedJobs` (1,000), which a session shared by many tests reaches."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(), default=-1)


DEFAULTS = {**ORDERS_MERGE, "transaction_cap": False}


def test_a_row_changed_inside_the_lookback_is_work(
    loads: Loads,
    pg: Schema,
    spark: SparkSession,
) -> None:
    pg.execute(TABLE, ROWS)
    loads.configure(pg, DEFAULTS, lookback="1h")
    assert loads.run().success
    before = _jobs(spark)
    idle = loads.run()
    after_idle = _jobs(spark)
    # A late row, dated inside the lookback below the cursor.
    pg.execute("INSERT INTO orders VALUES (9, 'late', TIMESTAMPTZ '2025-01-01 00:02:30+00')")
    late = loads.run()

    assert idle.metadata["spark"] == "not started (nothing new)" and after_idle == before
    assert late.metadata["spark"].startswith("a local session") and _jobs(spark) > after_idle
    assert late.metadata["rows_inserted"] == 1
    assert (9,) in loads.rows(["id"])


def test_a_reconcile_that_is_due_runs_spark_even_with_nothing_new(
    loads: Loads,
    pg: Schema,
    spark: SparkSession,
) -> None:
    pg.execute(TABLE, ROWS)
    loads.configure(pg, DEFAULTS, deletes="reconcile", reconcile_every=2)
    assert loads.run().success  # batch 1
    pg.execute("DELETE FROM orders WHERE id = 3")
    before = _jobs(spark)

    due = loads.run()  # batch 2: its turn
    after_due = _jobs(spark)
    idle = loads.run()  # batch 3 is not due

    assert due.metadata["deletes_reconciled"] is True and after_due > before
    assert due.metadata["rows_deleted"] == 1
    assert idle.metadata["spark"] == "not started (nothing new)" and _jobs(spark) == after_due


def test_a_column_narrowed_with_nothing_new_is_still_refused(loads: Loads, pg: Schema) -> None:
    """Found by the model-based test: the rows' text didn't change, so the run was skipped."""
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, qty integer, updated_at timestamptz NOT NULL)",
        "INSERT INTO orders VALUES (1, 5, TIMESTAMPTZ '2025-01-01 00:00:00+00')",
    )
    loads.configure(pg, DEFAULTS)
    assert loads.run().success
    pg.execute("ALTER TABLE orders ALTER COLUMN qty TYPE smallint")

    narrowed = loads.run()

    assert not narrowed.success
    assert "column 'qty' is int in the lake but smallint in the source" in (narrowed.failure or "")


def test_an_iceberg_run_with_nothing_new_reads_its_head_without_pyiceberg_or_pyspark(
    tmp_path: Path, pg: Schema
) -> None:
    """A fresh process with nothing new reads the default catalog's row and the metadata file
    without importing PyIceberg or pyspark (`spark_api.py`), records what a run with PyIceberg
    would, and still refuses a lake that is gone."""
    pg.execute(TABLE, ROWS)
    spec = {"name": "orders", "source": "shop", "table": f"{pg.name}.orders", **DEFAULTS}
    config = write_cli_config(tmp_path, {"shop": pg.source()}, [spec], format="iceberg")
    env = cli_env(config, tmp_path / "home")
    home = tmp_path / "home"
    assert run_cli(tmp_path, env, "--select", "orders").returncode == 0

    quick = run_cli(tmp_path, {**env, "PYTHONPROFILEIMPORTTIME": "1"}, "--select", "orders")

    assert quick.returncode == 0, quick.stderr[-3000:]
    imported = {line.split("|")[-1].strip() for line in quick.stderr.splitlines() if "|" in line}
    assert not {m for m in imported if m.startswith(("pyiceberg", "pyspark", "py4j"))}
    first, second = materializations(home, "orders")
    assert second["spark"] == "not started (nothing new)"
    for key in (
        "cursor",
        "lake_table_id",
        "lake_commit",
        "iceberg_snapshot_id",
        "dagster/row_count",
    ):
        assert second[key] == first[key], key
    assert second["dagster/column_schema"] == first["dagster/column_schema"]

    shutil.rmtree(tmp_path / "lake" / "orders")
    gone = run_cli(tmp_path, env, "--select", "orders")

    assert gone.returncode != 0
    assert "is not the table the stored cursor describes" in gone.stderr
    assert len(materializations(home, "orders")) == 2
