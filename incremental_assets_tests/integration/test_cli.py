"""`dagster asset materialize` as users run it: a subprocess, a DAGSTER_HOME on disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from incremental_assets_tests.harness import (
    Schema,
    cli_env,
    materializations,
    run_cli,
    write_cli_config,
)


def _config(tmp_path: Path, pg: Schema, remote: str | None = None) -> Path:
    table = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "merge",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }
    return write_cli_config(tmp_path, {"shop": pg.source()}, [table], remote=remote)


def _env(tmp_path: Path, config: Path, home: bool = True) -> dict[str, str]:
    return cli_env(config, tmp_path / "home" if home else None)


def _materialize(
    tmp_path: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path, env, "--select", "orders", *extra)


def _latest(home: Path) -> dict[str, Any]:
    return materializations(home, "orders")[-1]


@pytest.mark.xdist_group("connect")
def test_the_cursor_carries_over_between_cli_runs_and_full_refresh_is_one_flag(
    tmp_path: Path, pg: Schema, connect: str
) -> None:
    """Through a Spark Connect server: the subprocesses start no JVM of their own."""
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 30) i"
    )
    env = _env(tmp_path, _config(tmp_path, pg, connect))

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


def _incremental_assets(
    tmp_path: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("incremental-assets")), *args]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.xdist_group("connect")
def test_the_incremental_assets_command_runs_and_reports(
    tmp_path: Path, pg: Schema, connect: str
) -> None:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 12) i"
    )
    env = _env(tmp_path, _config(tmp_path, pg, connect))

    run = _incremental_assets(tmp_path, env, "run", "orders")
    status = _incremental_assets(tmp_path, env, "status", "--json")
    human = _incremental_assets(tmp_path, env, "status")

    assert run.returncode == 0, run.stderr[-2000:]
    assert (
        "orders: cursor 2025-01-01T00:00:12.000000+00:00, 12 read, 12 written, 12 in the lake"
        in run.stdout
    )
    (row,) = json.loads(status.stdout)
    assert (row["table"], row["mode"], row["rows_in_lake"], row["last_event"]) == (
        "orders",
        "merge",
        12,
        "materialization",
    )
    assert row["cursor"] == "2025-01-01T00:00:12.000000+00:00"
    assert "orders" in human.stdout and "2025-01-01T00:00:12.000000+00:00" in human.stdout


def test_the_command_explains_errors_without_a_traceback(tmp_path: Path, pg: Schema) -> None:
    config = _config(tmp_path, pg)
    config.write_text(config.read_text().replace("mode: merge", "mode: upsert"))
    env = _env(tmp_path, config)

    validate = _incremental_assets(tmp_path, env, "validate")
    unknown = _incremental_assets(
        tmp_path, _env(tmp_path, _config(tmp_path, pg)), "cursor", "reset", "nope", "--reason", "x"
    )
    no_home = _incremental_assets(
        tmp_path, _env(tmp_path, _config(tmp_path, pg), home=False), "status"
    )

    assert validate.returncode == 1 and "table 'orders', field 'mode'" in validate.stderr
    assert unknown.returncode == 1 and "no table named 'nope'" in unknown.stderr
    assert no_home.returncode == 1 and "DAGSTER_HOME is not set" in no_home.stderr
    assert all("Traceback" not in r.stderr for r in (validate, unknown, no_home))
