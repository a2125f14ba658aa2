"""A refused run says its reason once or twice, as a CLI user expects; Spark's own account of the
failure (the executor's, the task set's, the job's) goes to Spark's log file, not the console."""

from __future__ import annotations

from pathlib import Path

from incremental_assets.engine import HOME_FOLDER
from incremental_assets_tests.support.cli import cli_env, run_cli, write_cli_config
from incremental_assets_tests.support.postgres import Schema

REASON = "which decimal(38,18) can't hold exactly"


def test_a_value_the_lake_cant_hold_is_reported_once_or_twice_and_logged_in_full(
    tmp_path: Path, pg: Schema
) -> None:
    pg.execute(
        "CREATE TABLE items (id bigint PRIMARY KEY, n numeric NOT NULL, updated_at timestamptz "
        "NOT NULL)",
        "INSERT INTO items VALUES (1, 0.1234567890123456789012, '2025-01-01 00:00:00+00')",
    )
    table = {
        "name": "items",
        "source": "shop",
        "table": f"{pg.name}.items",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }
    config = write_cli_config(tmp_path, {"shop": pg.source()}, [table])
    home = tmp_path / "home"

    done = run_cli(tmp_path, cli_env(config, home), "--select", "items")

    assert done.returncode != 0
    console = done.stdout + done.stderr
    assert 1 <= console.count(REASON) <= 2, console[-5000:]
    assert "TaskSetManager" not in console and "Executor" not in console
    spark_log = (home / HOME_FOLDER / "logs" / "spark.log").read_text()
    assert REASON in spark_log and "TaskSetManager" in spark_log

    # Again from inside DAGSTER_HOME, where `make ui` runs Dagster: the package's folder there
    # (which holds Spark's log now) is not imported as the package.
    again = run_cli(home, cli_env(config, home), "--select", "items")
    console = again.stdout + again.stderr
    assert "No Definitions" not in console and REASON in console, console[-3000:]
