"""SIGKILL a real `dagster asset materialize` at each dangerous point, then run again, on both
lake formats. On Iceberg, `mid-commit` is after Spark's files are moved into `data/` and before
the catalog commit, `committed` after the catalog commit and before the materialization.

The in-process tests make a run raise at a pause point instead: a commit that fails part way,
and a run that committed but failed before its materialization was recorded.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from incremental_assets.config import load_project
from incremental_assets.lake.table import LakeFormat
from incremental_assets.pause_points import ENV as PAUSE_AT
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.cli import (
    cli_env,
    materializations,
    start_cli,
    write_cli_config,
)
from incremental_assets_tests.support.postgres import PostgresServer, Schema, wait_for
from incremental_assets_tests.support.project import (
    lake_files,
    latest_metadata,
    materialize,
    read_lake,
    rows_by,
)


def _setup(
    tmp_path: Path, pg: Schema, mode: str, lake_format: LakeFormat, **options: object
) -> Path:
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, v text NOT NULL, updated_at timestamptz NOT NULL)"
    )
    pg.execute(
        "INSERT INTO orders SELECT i, 'v1', TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 50) i"
    )
    table = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": mode,
        "cursor": "updated_at",
        "primary_key": ["id"],
        **options,
    }
    source = pg.source(rows_per_partition=10)  # several files per commit
    return write_cli_config(tmp_path, {"shop": source}, [table], format=lake_format)


def _change(pg: Schema) -> None:
    pg.execute(
        "UPDATE orders SET v = 'v2', updated_at = TIMESTAMPTZ '2025-02-01 00:00:00+00' + id * INTERVAL '1 s' WHERE id <= 10"
    )
    pg.execute(
        "INSERT INTO orders SELECT i, 'v1', TIMESTAMPTZ '2025-02-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(51, 60) i"
    )


def _kill(process: object) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    process.wait(timeout=30)  # type: ignore[attr-defined]


def _kill_while_extracting(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, env: dict[str, str]
) -> None:
    """Let the bounds query run, then lock the table so the read itself hangs, and kill."""
    seen = len(postgres.log_text())
    process = start_cli(tmp_path, env, "--select", "orders")
    with postgres.connect(autocommit=False) as locker:
        wait_for(lambda: "boundary_rows" in postgres.log_text()[seen:], timeout=120)
        locker.execute(f"LOCK TABLE {pg.name}.orders IN ACCESS EXCLUSIVE MODE")
        blocked = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'incremental_assets' "
            "AND wait_event_type = 'Lock'"
        )
        with postgres.connect() as watcher:
            wait_for(lambda: watcher.execute(blocked).fetchone()[0] > 0, timeout=60)  # type: ignore[index]
        _kill(process)
        locker.rollback()


def _kill_at(tmp_path: Path, point: str, env: dict[str, str]) -> None:
    marker = tmp_path / f"paused-{point}"
    process = start_cli(tmp_path, {**env, PAUSE_AT: f"{point}:{marker}"}, "--select", "orders")
    try:
        wait_for(marker.exists, timeout=180)
    finally:
        if process.poll() is not None:
            raise AssertionError(
                process.stderr.read()[-3000:] if process.stderr else "run ended early"
            )
        _kill(process)


def _every_file_is_whole(lake: Path) -> None:
    """The table's files, committed or not: in its folder (plain Parquet) or `data/` (Iceberg)."""
    for path in [*lake.glob("part-*.parquet"), *lake.glob("data/part-*.parquet")]:
        assert pq.read_metadata(path).num_rows >= 0


@pytest.mark.parametrize(
    ("point", "mode"),
    [
        ("extracting", "append"),
        ("staged", "append"),
        ("mid-commit", "append"),
        ("committed", "append"),
        ("mid-commit", "merge"),
        ("committed", "merge"),
    ],
)
def test_a_killed_run_loses_and_duplicates_nothing_once_run_again(
    tmp_path: Path,
    pg: Schema,
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
    lake_format: LakeFormat,
    point: str,
    mode: str,
) -> None:
    config = _setup(tmp_path, pg, mode, lake_format)
    home = tmp_path / "home"
    env = cli_env(config, home)
    project = load_project(config)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert materialize(project, "orders", instance, spark_resource).success
    _change(pg)

    if point == "extracting":
        _kill_while_extracting(tmp_path, pg, postgres, env)
    else:
        _kill_at(tmp_path, point, env)

    _every_file_is_whole(tmp_path / "lake" / "orders")
    assert len(materializations(home, "orders")) == 1  # the killed run recorded nothing
    time.sleep(0.5)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        rerun = materialize(project, "orders", instance, spark_resource)
    assert rerun.success, rerun.failure

    _expected_lake(pg, tmp_path / "lake", mode, replaced=False)


def _fail_at(monkeypatch: pytest.MonkeyPatch, module: str, point: str) -> None:
    """Make `point` in `incremental_assets.<module>` raise, as a full disk or a lost mount would."""

    def fail(name: str) -> None:
        if name == point:
            raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(f"incremental_assets.{module}.pause_point", fail)


def _expected_lake(pg: Schema, lake_dir: Path, mode: str, replaced: bool) -> None:
    versions = rows_by(read_lake(lake_dir, "orders"), ["id", "v", "updated_at"])
    source = sorted(pg.query("SELECT id, v, updated_at FROM orders"))
    if mode == "merge" or replaced:
        assert versions == source
    else:
        assert len(versions) == len(set(versions)) == 70  # 50 first versions, 10 second, 10 new
        assert set(source) <= set(versions)


@pytest.mark.parametrize(
    ("mode", "full_refresh"),
    [
        ("append", False),
        ("merge", False),
        ("append", True),
        ("merge", True),
        ("full_refresh", False),
    ],
)
def test_a_commit_that_fails_part_way_is_finished_by_the_next_run(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    full_refresh: bool,
) -> None:
    """Plain Parquet only: the journal finishes a commit; an Iceberg commit is one catalog swap."""
    project = load_project(_setup(tmp_path, pg, mode, "parquet", bucket_rows=10))
    lake_dir = tmp_path / "lake" / "orders"
    first = materialize(project, "orders", instance, spark_resource)
    assert first.success, first.failure
    old_files = set(lake_files(tmp_path / "lake", "orders"))
    _change(pg)
    _fail_at(monkeypatch, "lake.journal", "mid-commit")  # right after the first rename

    failed = materialize(project, "orders", instance, spark_resource, full_refresh)

    assert not failed.success
    assert "Table 'orders': the commit into the lake" in (failed.failure or "")
    assert "failed part way: [Errno 28] No space left on device" in (failed.failure or "")
    assert "The next run finishes this commit" in (failed.failure or "")
    assert latest_metadata(instance, "orders")["cursor"] == first.metadata["cursor"]
    # Nothing was removed yet: the old table survives next to the first new file.
    assert old_files < set(lake_files(tmp_path / "lake", "orders"))
    (journal,) = (lake_dir / "_journal").glob("*.json")
    assert len(json.loads(journal.read_text())["adds"]) > 1  # the commit stopped part way
    monkeypatch.undo()

    rerun = materialize(project, "orders", instance, spark_resource)

    assert rerun.success, rerun.failure
    assert not list((lake_dir / "_journal").iterdir())
    assert not list((lake_dir / "_staging").iterdir())
    _expected_lake(pg, lake_dir.parent, mode, replaced=full_refresh or mode == "full_refresh")


@pytest.mark.parametrize(
    ("mode", "full_refresh_again"),
    [("append", False), ("append", True), ("merge", False), ("merge", True)],
)
def test_a_full_refresh_that_committed_but_was_not_recorded_is_repeated(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
    lake_format: LakeFormat,
    mode: str,
    full_refresh_again: bool,
) -> None:
    project = load_project(_setup(tmp_path, pg, mode, lake_format))
    first = materialize(project, "orders", instance, spark_resource)
    assert first.success, first.failure
    _change(pg)
    _fail_at(monkeypatch, "factory", "committed")
    died = materialize(project, "orders", instance, spark_resource, full_refresh=True)
    assert not died.success
    assert latest_metadata(instance, "orders")["batch"] == 1  # the snapshot, batch 2, is unrecorded
    monkeypatch.undo()

    rerun = materialize(project, "orders", instance, spark_resource, full_refresh_again)

    assert rerun.success, rerun.failure
    assert (rerun.metadata["batch"], rerun.metadata["full_refresh"]) == (2, True)
    assert rerun.metadata["rows_extracted"] == 60
    if not full_refresh_again:
        assert "repeats the full refresh" in rerun.metadata["warnings"]
    _expected_lake(pg, tmp_path / "lake", mode, replaced=True)
