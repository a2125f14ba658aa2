"""One bad table doesn't hide the others: the good table loads with real Spark and a real
instance, the bad one's every run fails with the configuration's message, and `incremental-assets
validate` and `dg check defs` still fail on it."""

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

# The field the problem names, and the problem.
BAD_MODE = "table 'orders', field 'mode': Input should be 'append', 'merge' or 'full_refresh'"


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
    assert BAD_MODE in said.err and str(path) in said.err and "valid" not in said.out


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
    assert sorted(a["asset_key"] for a in assets) == ["events", "landing/events", "orders"]
    output = _plain(checked.stdout + checked.stderr)
    assert checked.returncode == 1, output[-3000:]
    # The attributes' typed schema stops it first, pointing at the line of the bad field.
    assert f"{folder / 'defs.yaml'}:" in output
    assert "mode: upsert" in output and "'upsert' is not valid" in output
