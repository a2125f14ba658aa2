"""`dagster asset materialize` as users run it: a subprocess, a DAGSTER_HOME on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from incremental_assets_tests.conftest import TEST_SPARK_CONF
from incremental_assets_tests.harness import Schema

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def _config(tmp_path: Path, pg: Schema) -> Path:
    config = {
        "spark": {
            "master": "local[2]",
            "conf": {k: v for k, v in TEST_SPARK_CONF.items() if not k.startswith("spark.jars")},
        },
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"shop": pg.source()},
        "tables": [
            {
                "name": "orders",
                "source": "shop",
                "table": f"{pg.name}.orders",
                "mode": "merge",
                "cursor": "updated_at",
                "primary_key": ["id"],
            }
        ],
    }
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _env(tmp_path: Path, config: Path, home: bool = True) -> dict[str, str]:
    env = {
        **os.environ,
        "INCREMENTAL_ASSETS_CONFIG": str(config),
        "DAGSTER_MODULE_NAME": "incremental_assets",
    }
    env.pop("DAGSTER_HOME", None)
    if home:
        (tmp_path / "home").mkdir(exist_ok=True)
        env["DAGSTER_HOME"] = str(tmp_path / "home")
    return env


def _materialize(
    tmp_path: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DAGSTER, "asset", "materialize", "--select", "orders", *extra],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _latest(home: Path) -> dict[str, Any]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("orders"))
        assert event is not None and event.asset_materialization is not None
        return {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}


def test_the_cursor_carries_over_between_cli_runs_and_full_refresh_is_one_flag(
    tmp_path: Path, pg: Schema
) -> None:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 30) i"
    )
    env = _env(tmp_path, _config(tmp_path, pg))

    first = _materialize(tmp_path, env)
    assert first.returncode == 0, first.stderr[-3000:]
    after_first = _latest(tmp_path / "home")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-02 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(31, 35) i"
    )

    second = _materialize(tmp_path, env)
    assert second.returncode == 0, second.stderr[-3000:]
    after_second = _latest(tmp_path / "home")
    assert (
        after_second["previous_cursor"]
        == after_first["cursor"]
        == "2025-01-01T00:00:30.000000+00:00"
    )
    assert after_second["rows_extracted"] == 6  # 5 new rows and the one tied with the cursor
    assert after_second["rows_inserted"] == 5

    refresh = _materialize(
        tmp_path,
        env,
        "--config-json",
        json.dumps({"ops": {"orders": {"config": {"full_refresh": True}}}}),
    )
    assert refresh.returncode == 0, refresh.stderr[-3000:]
    after_refresh = _latest(tmp_path / "home")
    assert after_refresh["full_refresh"] is True
    assert after_refresh["rows_extracted"] == 35


def test_a_bad_config_prints_the_message_not_a_traceback(tmp_path: Path, pg: Schema) -> None:
    config = _config(tmp_path, pg)
    config.write_text(config.read_text().replace("mode: merge", "mode: upsert"))

    result = _materialize(tmp_path, _env(tmp_path, config))

    assert result.returncode != 0
    assert f"Invalid configuration in {config} (1 problem):" in result.stderr
    assert "table 'orders', field 'mode'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_temporary_instance_is_refused_with_an_explanation(tmp_path: Path, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    result = _materialize(tmp_path, _env(tmp_path, _config(tmp_path, pg), home=False))

    assert result.returncode != 0
    assert (
        "this run uses a temporary Dagster instance (DAGSTER_HOME is not set)"
        in result.stdout + result.stderr
    )
    assert not (tmp_path / "lake" / "orders").exists()
