"""The shared engine's life, as users drive it: `incremental-assets engine ...` and fresh runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.engine import engine_folder, stop_engine
from incremental_assets.jvm import POSTGRES_JDBC, jar_path
from incremental_assets.pause_points import ENV as PAUSE_AT
from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    run_cli,
    start_cli,
    write_cli_config,
)
from incremental_assets_tests.support.postgres import Schema, free_port, wait_for
from incremental_assets_tests.support.project import read_lake, rows_by

CLI = str(Path(sys.executable).with_name("incremental-assets"))
ROOT = Path(__file__).resolve().parents[2]


def _engine(cwd: Path, env: dict[str, str], action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "engine", action], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _shared_config(tmp_path: Path, sources: dict[str, Any], tables: list[dict[str, Any]]) -> Path:
    config = write_cli_config(tmp_path, sources, tables)
    config.write_text(config.read_text().replace("spark:\n", "spark:\n  engine: shared\n", 1))
    return config


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """DAGSTER_HOME, its engine stopped at the end whatever the test did."""
    yield tmp_path / "home"
    stop_engine(tmp_path / "home")


def _drops_project(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A project of one table of file drops on the shared engine: its configuration, its landing
    folder (with the table's folder in it), and the table's entry."""
    landing = tmp_path / "landing"
    (landing / "drops").mkdir(parents=True)
    drops = {"name": "drops", "source": "landing", "table": "drops", "mode": "append"}
    config = _shared_config(tmp_path, {"landing": {"type": "files", "path": str(landing)}}, [drops])
    return config, landing, drops


def _orders_table(pg: Schema, name: str) -> dict[str, Any]:
    """A source table of 100 orders, and its entry in the configuration (source `shop`)."""
    pg.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    _orders(pg, name, 1, 100)
    return {
        "name": name,
        "source": "shop",
        "table": f"{pg.name}.{name}",
        "mode": "append",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }


def _orders(pg: Schema, name: str, first: int, last: int) -> None:
    pg.execute(
        f"INSERT INTO {name} SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
        f"FROM generate_series({first}, {last}) i"
    )


@pytest.mark.xdist_group("engine")
def test_the_shared_engine_starts_serves_runs_fails_them_cleanly_when_killed_and_stops(
    tmp_path: Path, pg: Schema
) -> None:
    tables = [_orders_table(pg, name) for name in ("orders", "refunds")]
    config = _shared_config(tmp_path, {"shop": pg.source()}, tables)
    env = cli_env(config, tmp_path / "home")
    # Create the instance's storage first: a brand-new DAGSTER_HOME is not safe to initialize
    # twice at once.
    dg.DagsterInstance.from_config(str(tmp_path / "home")).dispose()

    down = _engine(tmp_path, env, "status")
    started = _engine(tmp_path, env, "start")
    up = _engine(tmp_path, env, "status")
    assert (down.returncode, started.returncode, up.returncode) == (3, 0, 0), started.stderr[-2000:]
    assert "engine down" in down.stdout
    url = up.stdout.split("engine up at ", 1)[1].split()[0]
    assert started.stdout.startswith(f"engine up at {url}")

    # Two runs of different tables at once, both through the engine.
    both = [start_cli(tmp_path, env, "--select", name) for name in ("orders", "refunds")]
    assert [run.wait(timeout=600) for run in both] == [0, 0], [
        r.communicate()[1][-2000:] for r in both
    ]
    for name in ("orders", "refunds"):
        (first,) = materializations(tmp_path / "home", name)
        assert first["spark"].startswith(f"the shared engine at {url}")
        assert first["rows_written"] == 100

    # The engine killed while a run uses it: the run fails, saying so, and the cursor stays.
    _orders(pg, "orders", 101, 150)
    state = json.loads((engine_folder(tmp_path / "home") / "engine.json").read_text())
    marker = tmp_path / "paused"
    run = start_cli(tmp_path, {**env, PAUSE_AT: f"session:{marker}"}, "--select", "orders")
    wait_for(lambda: run.poll() is not None or marker.exists(), 180)
    os.killpg(state["pid"], signal.SIGKILL)
    marker.unlink()  # the run goes on, with a session whose server is gone
    _, errors = run.communicate(timeout=300)
    assert run.returncode != 0
    assert "Table 'orders': the Spark Connect server stopped answering" in errors, errors[-3000:]
    assert "incremental-assets engine start" in errors
    assert len(materializations(tmp_path / "home", "orders")) == 1

    # Started again, the next run loads what the failed one did not.
    assert _engine(tmp_path, env, "start").returncode == 0
    again = run_cli(tmp_path, env, "--select", "orders")
    assert again.returncode == 0, again.stderr[-2000:]
    assert materializations(tmp_path / "home", "orders")[-1]["rows_written"] == 50
    ids = rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])
    assert len(ids) == len(set(ids)) == 150

    stopped = _engine(tmp_path, env, "stop")
    after = _engine(tmp_path, env, "status")
    assert stopped.stdout.strip() == "engine stopped" and after.returncode == 3


@pytest.mark.xdist_group("engine")
def test_a_postgres_table_added_while_the_engine_runs_restarts_it_or_names_the_fix(
    tmp_path: Path, home: Path, pg: Schema
) -> None:
    """Started for a project of file drops, the engine lacks PostgreSQL's driver: a run of a
    table added since is refused while a run started before uses the engine, and restarts it
    once none does."""
    config, landing, drops = _drops_project(tmp_path)
    pq.write_table(pa.table({"id": [1, 2, 3]}), landing / "drops" / "part-0.parquet")
    env = cli_env(config, home)
    dg.DagsterInstance.from_config(str(home)).dispose()
    assert _engine(tmp_path, env, "start").returncode == 0
    marker = tmp_path / "paused"
    holding = start_cli(tmp_path, {**env, PAUSE_AT: f"session:{marker}"}, "--select", "drops")
    try:
        wait_for(lambda: holding.poll() is not None or marker.exists(), 180)
        assert marker.exists(), holding.communicate()[1][-3000:]

        orders = _orders_table(pg, "orders")
        sources = {"landing": {"type": "files", "path": str(landing)}, "shop": pg.source()}
        _shared_config(tmp_path, sources, [drops, orders])
        driver = jar_path(POSTGRES_JDBC)
        # Only in spark.jars: the tests' JVMs have every driver on their class path already.
        lacking = f"the jar {driver.name} ({driver}, in spark.jars)"
        status = _engine(tmp_path, env, "status")
        assert status.returncode == 4, status.stdout
        assert f"started without what the configuration now needs: {lacking}." in status.stdout
        assert status.stdout.rstrip().endswith("Fix: `incremental-assets engine restart`")

        # While the drops' run holds the engine, the orders' run is refused, naming the fix.
        refused = run_cli(tmp_path, env, "--select", "orders")
        assert refused.returncode != 0
        assert (
            f"was started without what this run's configuration needs: {lacking}. It takes "
            "these only when it starts, and other runs are using it now, so it was not "
            "restarted. Fix: when they have finished, run `incremental-assets engine restart` "
            "(it starts the engine with the current configuration), then run this again."
        ) in refused.stderr, refused.stderr[-3000:]
        assert materializations(home, "orders") == []
        marker.unlink()
        assert holding.wait(timeout=300) == 0, holding.communicate()[1][-3000:]
    finally:
        if holding.poll() is None:
            os.killpg(holding.pid, signal.SIGKILL)

    # Alone on it, the run restarts it with the driver, and loads.
    loaded = run_cli(tmp_path, env, "--select", "orders")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    (run,) = materializations(home, "orders")
    assert run["rows_written"] == 100
    assert run["spark"].endswith(f", restarted for what it lacked: {lacking}")
    assert _engine(tmp_path, env, "status").returncode == 0
    assert _engine(tmp_path, env, "stop").stdout.strip() == "engine stopped"


@pytest.mark.xdist_group("engine")
def test_one_ctrl_c_stops_make_ui_its_dagster_processes_and_the_engine_within_10_s(
    tmp_path: Path, home: Path
) -> None:
    """`make ui` for a project of its own (this virtualenv, a DAGSTER_HOME here, a free port),
    interrupted once as Ctrl-C does: SIGINT to make's process group."""
    config, _, _ = _drops_project(tmp_path)
    stamp = tmp_path / "installed"  # the virtualenv is there: make installs nothing
    stamp.touch()
    port = free_port()
    variables = {
        "VENV": str(Path(sys.executable).parent.parent),
        "BASE_STAMP": str(stamp),
        "HOME_DIR": str(home),
        "UI_CONFIG": str(config),
        "UI_ARGS": f"-h 127.0.0.1 -p {port}",
    }
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    log = tmp_path / "make-ui.log"
    with log.open("w") as out:
        make = subprocess.Popen(
            ["make", "--no-print-directory", "-C", str(ROOT), "ui"]
            + [f"{key}={value}" for key, value in variables.items()],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: make.poll() is not None or _code_server_up(port), 300)
        assert make.poll() is None, log.read_text()[-3000:]
        processes = _descendants(make.pid)
        commands = " ".join(processes.values())
        members = (
            "dagster dev",
            "dagster_webserver",
            "dagster._daemon",
            "code-server",
            "SparkConnectServer",
        )
        for member in members:
            assert member in commands, commands

        os.killpg(make.pid, signal.SIGINT)
        wait_for(lambda: not any(_running(pid) for pid in processes), 10)
        assert make.wait(timeout=1) != 0  # make ends as interrupted
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
    assert "engine up at" in log.read_text()
    assert not (engine_folder(home) / "engine.json").exists()


def _code_server_up(port: int) -> bool:
    """Whether the UI answers with the project's code location loaded (its code server up)."""
    query = (
        b'{"query": "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"}'
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", query, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return b'"LOADED"' in response.read()
    except OSError:
        return False


def _descendants(root: int) -> dict[int, str]:
    """`root`'s processes and all theirs, by pid: their command lines."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            found[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode()
        except OSError:
            continue
        todo += children.get(pid, [])
    return found


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has: only its entry is left)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
