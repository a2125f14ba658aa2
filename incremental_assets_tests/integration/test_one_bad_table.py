"""One bad table doesn't hide the others: the good table loads with real Spark and a real
instance, the bad one's every run fails with the configuration's message, every
`incremental-assets` command works on the good table and refuses the bad one by name, and
`incremental-assets validate` and `dg check defs` still fail on it."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from incremental_assets.cli import main as cli
from incremental_assets.config import load_config
from incremental_assets.definitions import ALL_TABLES_JOB, build_definitions
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.integration.test_component import DG, _plain, _project
from incremental_assets_tests.support.cli import cli_env, run_command, write_cli_config

# The field the problem names, and the problem.
BAD_MODE = (
    "table 'orders', field 'mode': 'upsert' is not one of its values; use 'append', 'merge' or "
    "'full_refresh' (`!upsert` in a one-line entry is `mode: merge`)"
)


def _attributes(landing: Path) -> dict[str, Any]:
    """Two tables on a landing folder: `events` as it should be, `orders` with a typo in its
    mode."""
    return {
        "lake": {"path": "./lake", "format": "parquet"},
        "sources": {"landing": {"type": "files", "path": str(landing)}},
        "tables": [
            {"name": "events", "source": "landing", "table": "events", "cursor": "at"},
            {"name": "orders", "source": "landing", "table": "orders", "mode": "upsert"},
        ],
    }


def _landing(tmp_path: Path) -> Path:
    landing = tmp_path / "landing"
    (landing / "events").mkdir(parents=True)
    at = [datetime(2025, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(5)]
    pq.write_table(pa.table({"id": list(range(5)), "at": at}), landing / "events" / "a.parquet")
    return landing


def _cli_config(tmp_path: Path) -> Path:
    """The two tables, with the suite's small local Spark for runs in a subprocess."""
    attributes = _attributes(_landing(tmp_path))
    return write_cli_config(tmp_path, attributes["sources"], attributes["tables"])


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(_attributes(_landing(tmp_path)), sort_keys=False))
    return path


def test_the_good_table_loads_and_every_run_of_the_bad_one_fails_with_its_message(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _config_file(tmp_path)
    loaded = load_config(path)
    defs = build_definitions(
        loaded.project, spark=spark_resource, invalid_tables=loaded.invalid_tables
    )

    run = defs.resolve_job_def(ALL_TABLES_JOB).execute_in_process(
        instance=instance, raise_on_error=False
    )
    again = defs.resolve_job_def(ALL_TABLES_JOB).execute_in_process(
        instance=instance, raise_on_error=False, asset_selection=[dg.AssetKey("orders")]
    )

    events = instance.get_latest_materialization_event(dg.AssetKey("events"))
    assert events is not None and events.asset_materialization is not None
    assert events.asset_materialization.metadata["dagster/row_count"].value == 5
    assert instance.get_latest_materialization_event(dg.AssetKey("orders")) is None
    for result in (run, again):
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        assert failure.step_key == "orders"
        message = failure.step_failure_data.error.message  # type: ignore[union-attr]
        assert f"Invalid configuration in {path} (1 problem):\n  - {BAD_MODE}" in message
    assert cli(["--config", str(path), "validate"]) == 1
    said = capsys.readouterr()
    assert BAD_MODE in said.err and str(path) in said.err
    assert said.out.startswith(f"{path}: 1 of 2 tables valid")


def _dg(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "NO_COLOR": "1"}
    env["PYTHONWARNINGS"] = "ignore"
    return subprocess.run(
        [DG, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


def test_dg_lists_both_tables_and_dg_check_defs_fails_on_the_bad_one(tmp_path: Path) -> None:
    folder = _project(tmp_path / "dg", _attributes(_landing(tmp_path)))

    listed = _dg(tmp_path / "dg", "list", "defs", "--json")
    checked = _dg(tmp_path / "dg", "check", "defs")

    assert listed.returncode == 0, _plain(listed.stderr)[-3000:]
    assets = json.loads(listed.stdout)["assets"]
    # The two tables, and the source the valid one reads.
    assert sorted(a["asset_key"] for a in assets) == ["events", "landing/events_source", "orders"]
    output = _plain(checked.stdout + checked.stderr)
    assert checked.returncode == 1, output[-3000:]
    # The attributes' typed schema stops it first, pointing at the line of the bad field.
    assert f"{folder / 'defs.yaml'}:" in output
    assert "mode: upsert" in output and "'upsert' is not valid" in output


def test_every_command_works_on_the_good_table_and_names_the_bad_one(tmp_path: Path) -> None:
    config = _cli_config(tmp_path)
    env = cli_env(config, tmp_path / "home")
    error = str(load_config(config).invalid_tables[0].error)

    run = run_command(tmp_path, env, "run", "events")
    moved = run_command(
        tmp_path, env, "cursor", "set", "events", "2025-01-01T00:00:02Z", "--reason", "x"
    )
    status = run_command(tmp_path, env, "status", "--json")
    named = run_command(tmp_path, env, "status", "events")
    validate = run_command(tmp_path, env, "validate")

    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "events: cursor 2025-01-01T00:00:04.000000+00:00, 5 read, 5 written" in run.stdout
    assert moved.returncode == 0, moved.stderr[-2000:]
    assert "events: cursor 2025-01-01T00:00:04.000000+00:00 -> " in moved.stdout
    assert status.returncode == 0, status.stderr[-2000:]
    (row,) = json.loads(status.stdout)
    assert (row["table"], row["rows_in_lake"], row["cursor_override"]["action"]) == (
        "events",
        5,
        "set",
    )
    assert named.returncode == 0 and named.stdout.splitlines()[1].startswith("events ")
    for done in (run, moved, status, named):  # each names the bad table, once, with its error
        assert done.stderr.count("table 'orders' is left out until its configuration is fixed") == 1
        assert error in done.stderr
    assert validate.returncode == 1
    assert f"{config}: 1 of 2 tables valid\n  events: append" in validate.stdout
    assert validate.stderr == f"incremental-assets: {error}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["status", "orders"],
        ["status", "--history", "events", "orders"],
        ["run", "events", "orders"],
        ["run", "orders", "--full"],
        ["backfill", "orders", "--from", "1", "--to", "2"],
        ["cursor", "set", "orders", "1", "--reason", "replay"],
        ["cursor", "reset", "orders", "--reason", "replay"],
        ["lake", "convert", "orders"],
    ],
)
def test_a_command_that_names_the_bad_table_refuses_it_with_its_config_error(
    tmp_path: Path, command: list[str]
) -> None:
    config = _cli_config(tmp_path)
    # The same error the bad table's asset shows in Dagster.
    error = str(load_config(config).invalid_tables[0].error)

    refused = run_command(tmp_path, cli_env(config, tmp_path / "home"), *command)

    assert refused.returncode == 1
    assert refused.stderr == f"incremental-assets: {error}\n"
    assert BAD_MODE in error and refused.stdout == ""
    assert not (tmp_path / "lake").exists()  # nothing ran
