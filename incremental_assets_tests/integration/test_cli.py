"""`dagster asset materialize` as users run it: a subprocess, a DAGSTER_HOME on disk."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.cli import main as cli
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    run_cli,
    run_command,
    write_cli_config,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import ProjectBuilder, materialize, write_project

DEFAULTS = {"name": "orders", "mode": "merge", "cursor": "updated_at", "primary_key": ["id"]}


def _env(tmp_path: Path, config: Path, home: bool = True) -> dict[str, str]:
    return cli_env(config, tmp_path / "home" if home else None)


def _materialize(
    tmp_path: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path, env, "--select", "orders", *extra)


def _create_orders(pg: Schema, rows: int) -> None:
    """Orders 1..rows, one second apart from 2025-01-01T00:00:00Z."""
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
        f"FROM generate_series(1, {rows}) i"
    )


def _latest(home: Path) -> dict[str, Any]:
    return materializations(home, "orders")[-1]


@pytest.mark.xdist_group("connect")
def test_the_cursor_carries_over_between_cli_runs_and_full_refresh_is_one_flag(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema, connect: str
) -> None:
    """Through a Spark Connect server: the subprocesses start no JVM of their own."""
    _create_orders(pg, 30)
    env = _env(tmp_path, make_project.cli_config(pg, DEFAULTS, remote=connect))

    first = _materialize(tmp_path, env)
    assert first.returncode == 0, first.stderr[-3000:]
    after_first = _latest(tmp_path / "home")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-02 00:00:00+00' + i * INTERVAL '1 s' "
        "FROM generate_series(31, 35) i"
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


def test_a_bad_config_prints_the_message_not_a_traceback(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema
) -> None:
    config = make_project.cli_config(pg, DEFAULTS)
    config.write_text(config.read_text().replace("mode: merge", "mode: upsert"))

    result = _materialize(tmp_path, _env(tmp_path, config))

    assert result.returncode != 0
    assert f"Invalid configuration in {config} (1 problem):" in result.stderr
    assert "table 'orders', field 'mode'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_temporary_instance_is_refused_with_an_explanation(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema
) -> None:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    result = _materialize(
        tmp_path, _env(tmp_path, make_project.cli_config(pg, DEFAULTS), home=False)
    )

    assert result.returncode != 0
    assert (
        "this run uses a temporary Dagster instance (DAGSTER_HOME is not set)"
        in result.stdout + result.stderr
    )
    assert not (tmp_path / "lake" / "orders").exists()


@pytest.mark.xdist_group("connect")
def test_the_incremental_assets_command_runs_and_reports(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema, connect: str
) -> None:
    _create_orders(pg, 12)
    env = _env(tmp_path, make_project.cli_config(pg, DEFAULTS, remote=connect))

    run = run_command(tmp_path, env, "run", "orders")
    status = run_command(tmp_path, env, "status", "--json")
    human = run_command(tmp_path, env, "status")

    assert run.returncode == 0, run.stderr[-2000:]
    assert (
        "orders: cursor 2025-01-01T00:00:12.000000+00:00, 12 read, 12 written, 12 in the lake"
        in run.stdout
    )
    (row,) = json.loads(status.stdout)
    assert (row["table"], row["mode"], row["rows_in_lake"], row["cursor_override"]) == (
        "orders",
        "merge",
        12,
        None,
    )
    assert row["last_run_id"] is not None
    assert row["cursor"] == "2025-01-01T00:00:12.000000+00:00"
    assert "orders" in human.stdout and "2025-01-01T00:00:12.000000+00:00" in human.stdout


def test_the_command_explains_errors_without_a_traceback(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema
) -> None:
    config = make_project.cli_config(pg, DEFAULTS)
    config.write_text(config.read_text().replace("mode: merge", "mode: upsert"))
    env = _env(tmp_path, config)

    validate = run_command(tmp_path, env, "validate")
    unknown = run_command(
        tmp_path,
        _env(tmp_path, make_project.cli_config(pg, DEFAULTS)),
        "cursor",
        "reset",
        "nope",
        "--reason",
        "x",
    )
    typo = run_command(
        tmp_path, _env(tmp_path, make_project.cli_config(pg, DEFAULTS)), "run", "ordrs"
    )
    no_home = run_command(
        tmp_path, _env(tmp_path, make_project.cli_config(pg, DEFAULTS), home=False), "status"
    )

    assert validate.returncode == 1 and "table 'orders', field 'mode'" in validate.stderr
    assert unknown.returncode == 1 and "no table named 'nope'" in unknown.stderr
    assert "did you mean" not in unknown.stderr
    assert typo.returncode == 1 and "no table named 'ordrs' in " in typo.stderr
    assert "; did you mean 'orders'? (tables: orders)" in typo.stderr
    assert no_home.returncode == 1 and "DAGSTER_HOME is not set" in no_home.stderr
    assert all("Traceback" not in r.stderr for r in (validate, unknown, typo, no_home))


def test_backfill_help_says_how_to_write_from_and_to(tmp_path: Path) -> None:
    shown = run_command(tmp_path, dict(os.environ), "backfill", "--help")

    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0, shown.stderr
    assert (
        "--from FROM the first cursor value to re-extract (included), written as the table's "
        in text
    )
    for form in ("timestamptz 2025-06-01T00:00:00Z", "date 2025-06-01", "integer 1000"):
        assert form in text
    assert "--to TO the cursor value to stop before (excluded), written as --from is" in text
    assert "backfill orders --from 2025-06-01T00:00:00Z --to 2025-06-08T00:00:00Z" in text


def _python_m(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_command(tmp_path, env, *args, python_m=True)


@pytest.mark.xdist_group("connect")
def test_python_m_validates_runs_refreshes_backfills_and_reports_checks(
    tmp_path: Path, pg: Schema, connect: str
) -> None:
    _create_orders(pg, 10)
    table = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "cursor": "updated_at",
        "primary_key": ["id"],
        "checks": {"freshness": "1h"},  # the rows are from 2025: this check fails, as a warning
    }
    config = write_cli_config(tmp_path, {"shop": pg.source()}, [table], remote=connect)
    env = _env(tmp_path, config)

    validate = _python_m(tmp_path, env, "validate")
    run = _python_m(tmp_path, env, "run", "orders")
    full = _python_m(tmp_path, env, "run", "orders", "--full")
    backfill = _python_m(
        tmp_path,
        env,
        "backfill",
        "orders",
        "--from",
        "2025-01-01T00:00:03Z",
        "--to",
        "2025-01-01T00:00:06Z",
    )
    # The first run recorded the cursor's type: a bad value is refused before Spark starts.
    typo = _python_m(tmp_path, env, "backfill", "orders", "--from", "forty", "--to", "2025-02-01")

    assert validate.returncode == 0 and "valid, 1 tables" in validate.stdout
    for done in (run, full, backfill):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "check freshness: FAILED (WARN): " in done.stdout
        assert "Stack Trace" not in done.stdout + done.stderr
    for done in (run, full):
        assert "check primary_key_unique: passed" in done.stdout
    # The backfill re-read what the lake holds and wrote no file: nothing for the check to read.
    assert "check primary_key_unique: not run: this run wrote no file" in backfill.stdout
    assert "orders: cursor 2025-01-01T00:00:10.000000+00:00, 10 read" in run.stdout
    assert "window" in run.stdout  # the run's own log lines show progress
    runs = materializations(tmp_path / "home", "orders")
    assert runs[1]["full_refresh"] is True and runs[1]["rows_extracted"] == 10
    assert runs[2]["backfill"] == "[2025-01-01T00:00:03Z, 2025-01-01T00:00:06Z)"
    assert runs[2]["rows_extracted"] == 3 and runs[2]["cursor"] == runs[1]["cursor"]
    assert typo.returncode == 1 and "'forty' is not a valid timestamptz" in typo.stderr
    assert "--from" in typo.stderr and "Traceback" not in typo.stderr
    assert len(materializations(tmp_path / "home", "orders")) == 3


@pytest.mark.xdist_group("connect")
def test_a_failed_run_prints_one_message_and_no_stack_trace(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema, connect: str
) -> None:
    # The table doesn't exist in the database.
    config = make_project.cli_config(pg, DEFAULTS, remote=connect)
    run = _python_m(tmp_path, _env(tmp_path, config), "run", "orders")

    assert run.returncode == 1
    assert "FAILED" in run.stdout and "orders: Table 'orders'" in run.stdout
    assert "does not exist" in run.stdout
    assert "Stack Trace" not in run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("home", "message"),
    [
        ("relative/home", "DAGSTER_HOME is 'relative/home', a relative path"),
        ("/nonexistent/dagster_home", "which is not a directory"),
    ],
)
def test_a_bad_dagster_home_is_explained(
    make_project: ProjectBuilder,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    home: str,
    message: str,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", home)
    assert cli(["--config", str(make_project.cli_config(pg, DEFAULTS)), "status"]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("table", "window", "message"),
    [
        (
            {"cursor": {"column": "at", "type": "integer"}},
            ("forty", "50"),
            "'forty' is not a valid integer",
        ),
        (
            {"cursor": {"column": "at", "type": "integer"}},
            ("50", "40"),
            "the backfill window [50, 40) is empty",
        ),
        ({"cursor": {"column": "at", "type": "integer"}}, ("50", "50"), "is empty"),
        ({"mode": "full_refresh"}, ("1", "2"), "has no cursor, so there is no window to backfill"),
    ],
)
def test_a_backfill_that_cant_run_is_refused_before_spark_starts(
    tmp_path: Path,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    table: dict[str, Any],
    window: tuple[str, str],
    message: str,
) -> None:
    entry = {"name": "orders", "source": "shop", "table": f"{pg.name}.orders", **table}
    config = write_cli_config(tmp_path, {"shop": pg.source()}, [entry])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))

    code = cli(
        ["--config", str(config), "backfill", "orders", "--from", window[0], "--to", window[1]]
    )

    assert code == 1 and message in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()  # nothing ran


def test_status_shows_the_last_run_and_a_pending_cursor_override_apart(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, i FROM generate_series(1, 30) i")
    entry = {"name": "orders", "source": "shop", "table": f"{pg.name}.orders", "cursor": "at"}
    project = write_project(
        tmp_path,
        {
            "lake": {"path": str(tmp_path / "lake")},
            "sources": {"shop": pg.source()},
            "tables": [entry],
        },
    )
    run = materialize(project, "orders", instance, spark_resource)
    monkeypatch.setenv("DAGSTER_HOME", str(instance.root_directory))
    config = ["--config", project.path]
    assert cli([*config, "cursor", "set", "orders", "20", "--reason", "replay"]) == 0
    capsys.readouterr()

    assert cli([*config, "status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert cli([*config, "status"]) == 0
    text = capsys.readouterr().out

    assert (row["cursor"], row["last_run_cursor"], row["last_run_id"]) == ("20", "30", run.run_id)
    assert (row["rows_in_lake"], row["rows_written"]) == (30, 30)
    override = row["cursor_override"]
    assert (override["action"], override["cursor"], override["previous_cursor"]) == (
        "set",
        "20",
        "30",
    )
    assert override["note"].startswith("replay (set by ")
    assert "cursor set at " in text and "the next run reads from 20 (was 30); replay" in text


RENAMING_TRANSLATOR = """
import dagster as dg

from incremental_assets import IncrementalAssetsTranslator


class Renamed(IncrementalAssetsTranslator):
    def get_asset_spec(self, table):
        spec = super().get_asset_spec(table)
        return spec.replace_attributes(key=dg.AssetKey(["warehouse", table.name]))
"""


@pytest.mark.xdist_group("connect")
def test_a_translator_named_in_the_config_names_the_assets_for_the_command_too(
    make_project: ProjectBuilder, tmp_path: Path, pg: Schema, connect: str
) -> None:
    """`status` and `cursor set` find the table under the key a custom translator gives it."""
    _create_orders(pg, 12)
    config = make_project.cli_config(pg, DEFAULTS, remote=connect)
    config.write_text(config.read_text() + "translator: renamed_assets.Renamed\n")
    (tmp_path / "renamed_assets.py").write_text(RENAMING_TRANSLATOR)
    env = {**_env(tmp_path, config), "PYTHONPATH": str(tmp_path)}

    run = run_command(tmp_path, env, "run", "orders")
    moved = run_command(
        tmp_path, env, "cursor", "set", "orders", "2025-01-01T00:00:05Z", "--reason", "replay"
    )
    status = run_command(tmp_path, env, "status", "--json")

    assert run.returncode == 0 and moved.returncode == 0, (run.stderr[-2000:], moved.stderr[-2000:])
    (row,) = json.loads(status.stdout)
    assert row["asset_key"] == "warehouse/orders"
    assert row["rows_in_lake"] == 12
    assert row["cursor"] == "2025-01-01T00:00:05.000000+00:00"
    assert row["cursor_override"]["previous_cursor"] == "2025-01-01T00:00:12.000000+00:00"
