"""Two `dagster asset materialize` processes for the same table, the first held inside its lock.

The test holds an ACCESS EXCLUSIVE lock on the source table, so the first run takes the lake lock
and then blocks on its first read until the test lets go. Where the second run stops is visible
from outside: waiting for the lake lock, it has `<table>/_lock` open; without that lock it would
reach the source and queue behind the table lock as well. Both lake formats take that lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    start_cli,
    write_cli_config,
)
from incremental_assets_tests.support.postgres import PostgresServer, Schema, wait_for
from incremental_assets_tests.support.project import read_lake, rows_by

CLI = str(Path(sys.executable).with_name("incremental-assets"))


def _setup(
    tmp_path: Path, pg: Schema, connect: str, lock_timeout: str, lake_format: LakeFormat
) -> dict[str, str]:
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)",
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
        "FROM generate_series(1, 200) i",
    )
    table = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "append",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }
    config = write_cli_config(
        tmp_path,
        {"shop": pg.source()},
        [table],
        remote=connect,
        lock_timeout=lock_timeout,
        format=lake_format,
    )
    env = cli_env(config, tmp_path / "home")
    # Create the instance's storage first: a brand-new DAGSTER_HOME is not safe to initialize
    # twice at once.
    dg.DagsterInstance.from_config(str(tmp_path / "home")).dispose()
    return env


def _waiting_on_the_table(pg: Schema) -> int:
    """Sessions queued for a lock on the source table (the test's own lock is granted)."""
    (count,) = pg.query(
        f"SELECT count(*) FROM pg_locks WHERE relation = '{pg.name}.orders'::regclass "
        "AND NOT granted"
    )[0]
    return int(count)


def _has_open(run: subprocess.Popen[str], path: Path) -> bool:
    """Whether a process of the run's process group has `path` open."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(pid)) != run.pid:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in fds):
                return True
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue  # the process ended while we looked
    return False


@contextmanager
def _first_run_held(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, env: dict[str, str]
) -> Iterator[subprocess.Popen[str]]:
    """Start a run that takes the lake lock, then hangs on the locked source table until exit."""
    with postgres.connect(autocommit=False) as locker:
        locker.execute(f"LOCK TABLE {pg.name}.orders IN ACCESS EXCLUSIVE MODE")
        first = start_cli(tmp_path, env, "--select", "orders")
        try:
            wait_for(lambda: first.poll() is not None or _waiting_on_the_table(pg) == 1, 180)
            assert first.poll() is None, first.communicate()[1][-3000:]
            yield first
        except BaseException:
            _kill_if_running(first)
            raise
        finally:
            locker.rollback()


def _lock_file(tmp_path: Path) -> Path:
    return tmp_path / "lake" / "orders" / "_lock"


def _kill_if_running(run: subprocess.Popen[str]) -> None:
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)


@pytest.mark.xdist_group("connect")
def test_the_second_run_waits_for_the_lock_then_continues_from_the_first_runs_cursor(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, connect: str, lake_format: LakeFormat
) -> None:
    env = _setup(tmp_path, pg, connect, "10m", lake_format)
    with _first_run_held(tmp_path, pg, postgres, env) as first:
        second = start_cli(tmp_path, env, "--select", "orders")
        try:
            wait_for(
                lambda: (
                    second.poll() is not None
                    or _has_open(second, _lock_file(tmp_path))
                    or _waiting_on_the_table(pg) > 1
                ),
                timeout=180,
            )
            assert _waiting_on_the_table(pg) == 1, (
                "the second run reached the source while the first held the table's lock"
            )
            assert second.poll() is None and first.poll() is None
            assert materializations(tmp_path / "home", "orders") == []
        except BaseException:
            _kill_if_running(second)
            raise
    outputs = [run.communicate(timeout=300) for run in (first, second)]

    assert [first.returncode, second.returncode] == [0, 0], [err[-2000:] for _, err in outputs]
    before, after = materializations(tmp_path / "home", "orders")
    assert before["previous_cursor"] is None
    # The second run read its state only after the first had recorded its result.
    assert after["previous_cursor"] == before["cursor"]
    assert after["cursor"] == before["cursor"] == "2025-01-01T00:03:20.000000+00:00"
    assert (before["rows_written"], after["rows_written"]) == (200, 0)
    lake = rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])
    assert len(lake) == len(set(lake)) == 200


@pytest.mark.xdist_group("connect")
def test_the_second_run_gives_up_after_the_lock_timeout_naming_the_holder(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, connect: str
) -> None:
    """Plain Parquet only: the timeout and its message are the lock's, which both formats share
    (lock.py); the first test here waits for it on both."""
    env = _setup(tmp_path, pg, connect, "2s", "parquet")
    with _first_run_held(tmp_path, pg, postgres, env) as first:
        holder = _lock_file(tmp_path).read_text()
        second = start_cli(tmp_path, env, "--select", "orders")
        try:
            _, errors = second.communicate(timeout=180)
        finally:
            _kill_if_running(second)
        assert second.returncode != 0
        assert "Table 'orders': another run is writing" in errors, errors[-3000:]
        assert f"still holds its lock after 0:00:02: {holder}" in errors
        assert "raise lake.lock_timeout" in errors
        assert _waiting_on_the_table(pg) == 1  # the second run never read the source
    _, first_errors = first.communicate(timeout=300)

    assert first.returncode == 0, first_errors[-2000:]
    (only,) = materializations(tmp_path / "home", "orders")
    assert only["rows_written"] == 200
    lake = rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])
    assert len(lake) == len(set(lake)) == 200


@pytest.mark.xdist_group("connect")
def test_a_cursor_set_during_a_run_waits_for_it_and_keeps_its_batch(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, connect: str
) -> None:
    """`cursor set` records the batch number the in-flight run committed, not the one before it.

    Had it read the state before the run recorded its own, the next run would reuse that batch
    number and replace the in-flight run's committed rows.

    Plain Parquet only, for the suite's time: `cursor set` takes the lock both formats share, and
    records the same state whatever the format; the first test here waits for it on both.
    """
    env = _setup(tmp_path, pg, connect, "10m", "parquet")
    first = start_cli(tmp_path, env, "--select", "orders")
    assert first.wait(timeout=300) == 0, first.communicate()[1][-3000:]
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
        "FROM generate_series(201, 250) i"
    )
    with _first_run_held(tmp_path, pg, postgres, env) as held:
        moving = subprocess.Popen(
            [CLI, "cursor", "set", "orders", "2025-01-01T00:04:10Z", "--reason", "skip ahead"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: moving.poll() is not None or _has_open(moving, _lock_file(tmp_path)), 120
            )
            assert moving.poll() is None, moving.communicate()[1][-3000:]
        except BaseException:
            _kill_if_running(moving)
            raise
    assert held.wait(timeout=300) == 0, held.communicate()[1][-3000:]
    assert moving.wait(timeout=120) == 0, moving.communicate()[1][-3000:]
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' "
        "FROM generate_series(251, 260) i"
    )
    last = start_cli(tmp_path, env, "--select", "orders")
    assert last.wait(timeout=300) == 0, last.communicate()[1][-3000:]

    batches = [m["batch"] for m in materializations(tmp_path / "home", "orders")]
    assert batches == [1, 2, 3]
    lake = rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])
    assert len(lake) == len(set(lake)) == 260
