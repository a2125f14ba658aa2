"""The Iceberg commit made by Spark, against the defects the hand-built commit had (docs/
lake-format.md, "What the commit rules out", names each test here):

* a run never deletes what another run's branch holds, nor the files of a commit whose outcome
  is unknown, which is not applied twice if it lands late;
* a catalog entry whose metadata can't be read, or that names another place, is never dropped
  from a shared catalog; in the lake's own catalog a full refresh rebuilds it;
* two runs of one batch never both land, whatever the table's retry setting;
* a recorded snapshot stays readable until it is past both the count and the age;
* a failure before the catalog took a commit says its cause; a catalog that stops answering after
  it took one leaves the run recorded;
* another writer's commit is refused by an incremental run and replaced by a full refresh;
* the catalog's password is in no message;
* a lake copied to another folder is refused as moved, and a full refresh rebuilds it there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
from pyspark.sql import SparkSession

from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg import commits as commits_module
from incremental_assets.lake.iceberg import table as table_module
from incremental_assets_tests.support.loads import ORDERS_APPEND, ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import (
    ICEBERG,
    change_orders,
    create_orders,
    orders_held,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by


def _lake(loads: Loads) -> IcebergLake:
    """The project's `orders` as the product opens it: its catalog, its branches."""
    return IcebergLake(loads.project.lake, "orders", "incremental_assets.orders")


def _main(table: Any) -> list[Any]:
    """The snapshots of main, oldest first (a refused run's branch left one beside them)."""
    found, at = [], table.current_snapshot()
    while at is not None:
        found.append(at)
        at = table.snapshot_by_id(at.parent_snapshot_id) if at.parent_snapshot_id else None
    return found[::-1]


def _kill(process: Any) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _files_of_branch(loads: Loads, branch: str) -> list[str]:
    """The data and delete files the branch's snapshot reads."""
    table = loads.iceberg_table()
    files = table.inspect.files(snapshot_id=table.metadata.refs[branch].snapshot_id)
    return [path.removeprefix("file:") for path in files["file_path"].to_pylist()]


@pytest.mark.pools_off
@pytest.mark.xdist_group("connect")
def test_a_run_never_deletes_what_another_runs_branch_holds(
    loads: Loads,
    pg: Schema,
    connect: str,
) -> None:
    """Defect 1: with `lake.lock` set on a storage where it doesn't exclude, a run's recovery
    deleted another live run's uncommitted files. Now a run's uncommitted snapshot is on its own
    branch, which no other run touches while it is young, and no run deletes data files."""
    create_orders(pg, 50)
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "lock": False})
    assert loads.run().success
    change_orders(pg, 1)
    writer_a, marker = loads.paused_run("mid-commit", remote=connect)
    state = _lake(loads).state()
    assert state is not None
    (branch,) = [name for name in state.refs if name.startswith("ia-")]
    held = _files_of_branch(loads, branch)

    b = loads.run()

    assert b.success, b.failure
    assert held and all(Path(path).exists() for path in held)
    marker.unlink()
    _, stderr = writer_a.communicate(timeout=300)
    assert writer_a.returncode != 0
    assert "another writer committed" in stderr and "nothing of it was committed" in stderr
    change_orders(pg, 2)
    assert loads.run().success
    held_rows = loads.rows(["id", "note", "updated_at"])
    assert len(held_rows) == len(set(held_rows))  # no version twice
    assert sorted({r[0]: r[1] for r in held_rows}.items()) == orders_held(pg)


@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize("meanwhile", ["another run committed", "nothing"])
def test_a_commit_that_lands_after_its_run_died_is_never_applied_twice(
    loads: Loads,
    pg: Schema,
    connect: str,
    spark: SparkSession,
    meanwhile: str,
) -> None:
    """Defect 2: the files of a commit whose outcome was unknown were deleted by the next run,
    though the catalog (REST behind a timeout, a replicated database) could still apply it. Now
    nothing deletes them, and the late commit lands only where main still is where it began: on
    a table another run moved on, it is refused; on one nobody touched, the next run recognises
    the batch as committed and repeats it in place, not beside it."""
    create_orders(pg, 50)
    loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    assert loads.run().success
    change_orders(pg, 1)
    writer_a, _ = loads.paused_run("mid-commit", remote=connect)
    _kill(writer_a)  # right before main would move: whether it did, the run never learnt
    lake = _lake(loads)
    state = lake.state()
    assert state is not None
    (branch,) = [name for name in state.refs if name.startswith("ia-")]
    held = _files_of_branch(loads, branch)
    if meanwhile == "another run committed":
        assert loads.run().success
    assert all(Path(path).exists() for path in held)

    session = lake.session(spark)
    late = (
        f"CALL {lake.catalog.name}.system.fast_forward("
        f"'{lake.procedure_table()}', 'main', '{branch}')"
    )
    if meanwhile == "another run committed":
        with pytest.raises(Exception, match="not an ancestor"):
            session.sql(late).collect()
    else:
        session.sql(late).collect()  # the commit lands late
    run = loads.run()

    assert run.success, run.failure
    held_rows = loads.rows(["id", "note", "updated_at"])
    assert len(held_rows) == len(set(held_rows))
    assert sorted({r[0]: r[1] for r in held_rows}.items()) == orders_held(pg)


def test_an_unreadable_entry_in_a_shared_catalog_is_refused_never_dropped(
    loads: Loads,
    pg: Schema,
    pg_catalog: str,
) -> None:
    """Defect 3: a catalog entry whose metadata this host couldn't read counted as a lost table
    and was dropped and replaced, even in a catalog other lakes share."""
    create_orders(pg, 20)
    catalog = {"type": "sql", "uri": pg_catalog}
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "catalog": catalog, "namespace": pg.name})
    assert loads.run().success
    shutil.rmtree(loads.lake_dir / "orders" / "metadata")  # unreadable from here

    incremental = loads.run()
    full = loads.run(full_refresh=True)

    assert not incremental.success and "can't be read" in (incremental.failure or "")
    assert not full.success
    assert "a shared catalog's entry is never dropped or replaced" in (full.failure or "")
    with psycopg.connect(pg_catalog.replace("postgresql+psycopg2", "postgresql")) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM iceberg_tables WHERE table_namespace = %s "
            "AND table_name = 'orders'",
            (pg.name,),
        ).fetchone()
    assert rows == (1,)


def test_an_unreadable_entry_in_the_lakes_own_catalog_is_rebuilt_by_a_full_refresh(
    loads: Loads,
    pg: Schema,
) -> None:
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    assert loads.run().success
    shutil.rmtree(loads.lake_dir / "orders" / "metadata")

    incremental = loads.run()
    full = loads.run(full_refresh=True)

    assert not incremental.success and "full" in (incremental.failure or "")
    assert full.success, full.failure
    assert loads.rows(["id", "note"]) == orders_held(pg)


@pytest.mark.pools_off
@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize("retries", [None, "10"])
def test_two_runs_of_one_batch_never_both_land_whatever_the_tables_retry_setting(
    loads: Loads,
    pg: Schema,
    connect: str,
    spark: SparkSession,
    retries: str | None,
) -> None:
    """Defect 4: "commits are never retried" rested on the table property
    `commit.retry.num-retries`; unset, two overlapping runs of one batch both landed. Now a
    run's commit is a fast-forward that Iceberg refuses unless main is where the run began:
    retried, it is refused again."""
    create_orders(pg, 50)
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "lock": False})
    assert loads.run().success
    lake = _lake(loads)
    if retries is not None:
        lake.session(spark).sql(
            f"ALTER TABLE {lake.reference()} SET TBLPROPERTIES "
            f"('commit.retry.num-retries' = '{retries}', 'commit.retry.min-wait-ms' = '10')"
        )
    change_orders(pg, 1)
    writer_a, marker = loads.paused_run("staged", remote=connect)

    b = loads.run()
    marker.unlink()
    _, stderr = writer_a.communicate(timeout=300)

    assert b.success, b.failure
    assert writer_a.returncode != 0 and "Two runs of the table overlapped" in stderr
    table = loads.iceberg_table()
    assert [s.summary["incremental-assets.batch"] for s in _main(table)] == ["1", "2"]
    held = rows_by(table.scan().to_arrow(), ["id", "note", "updated_at"])
    assert len(held) == len(set(held))


def test_a_recorded_snapshot_stays_readable_until_past_both_the_count_and_the_age(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Defect 5: snapshots were kept by count alone, and runs that wrote nothing took one too:
    at one run a minute, a recorded `iceberg_snapshot_id` lost its files within two hours."""
    create_orders(pg, 50)
    loads.configure(pg, ORDERS_MERGE, lake={**ICEBERG, "keep_snapshots": 2})
    recorded: dict[int, list[tuple[Any, ...]]] = {}
    for run in range(5):
        if run:
            change_orders(pg, run)
        result = loads.run()
        assert result.success, result.failure
        recorded[result.metadata["iceberg_snapshot_id"]] = orders_held(pg)
    nothing = loads.run()
    assert nothing.success and nothing.metadata["iceberg_snapshot_id"] in recorded

    table = loads.iceberg_table()
    ours = [
        s for s in table.snapshots() if "incremental-assets.txn" in s.summary.additional_properties
    ]
    # None a day old: all kept, whatever keep_snapshots says (the first load's, then each
    # merge's delete and append).
    assert len(ours) == 1 + 2 * 4
    for snapshot, rows in recorded.items():
        assert rows_by(table.scan(snapshot_id=snapshot).to_arrow(), ["id", "note"]) == rows

    aged = loads.configure(
        pg, ORDERS_MERGE, lake={**ICEBERG, "keep_snapshots": 2, "keep_snapshots_for": "0s"}
    )
    change_orders(pg, 5)
    expired = loads.run()

    assert expired.success, expired.failure
    assert "expire: expired" in expired.metadata["maintenance"]
    kept = [s.snapshot_id for s in table.refresh().snapshots()]
    assert len(kept) == 2 and expired.metadata["iceberg_snapshot_id"] in kept
    assert not set(recorded) & set(kept[:-2])
    now = table.scan(snapshot_id=expired.metadata["iceberg_snapshot_id"]).to_arrow()
    assert rows_by(now, ["id", "note"]) == orders_held(pg)
    # `status --history` marks the runs whose snapshot expired instead of offering them.
    from incremental_assets import cli

    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))
    capsys.readouterr()
    assert cli.main(["--config", aged.path, "status", "--history", "orders", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    marked = {r["iceberg_snapshot_id"]: r["snapshot_expired"] for r in history}
    assert marked[expired.metadata["iceberg_snapshot_id"]] is False
    assert {marked[s] for s in recorded if s not in kept} == {True}


def test_the_shipped_instance_runs_one_run_per_table_at_a_time(tmp_path: Path) -> None:
    """Defect 6: without a pool limit, two overlapping runs left the table refused under a
    message blaming a restore. The shipped dagster.yaml limits every pool (each table's is
    `incremental_assets/<table>`) to one run; runs that overlap anyway are refused with a
    message that says so (`test_two_runs_of_one_batch_never_both_land...`)."""
    shutil.copy(Path(__file__).parents[2] / "dagster.yaml", tmp_path / "dagster.yaml")

    with dg.DagsterInstance.from_config(str(tmp_path)) as shipped:
        pools = shipped.get_concurrency_config().pool_config

    assert pools.default_pool_limit == 1


@pytest.mark.parametrize("point", ["mid-commit", "committed"])
def test_a_conversion_killed_before_or_after_its_commit_finishes_when_run_again(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    point: str,
) -> None:
    """Defect 7: a conversion killed between creating the table and its first snapshot was
    stuck. Now the table is created with its rows in one catalog commit (CREATE TABLE AS
    SELECT): killed before it, nothing exists; after it, the command run again records it."""
    from incremental_assets import cli
    from incremental_assets import conversion as conversion_module

    create_orders(pg, 30)
    loads.configure(pg, ORDERS_APPEND)
    assert loads.run().success
    before = loads.rows(["id", "note", "_batch"])
    iceberg = loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))
    command = ["--config", iceberg.path, "lake", "convert", "orders", "--reason", "test"]

    def killed(name: str) -> None:
        if name == point:
            raise KeyboardInterrupt

    with monkeypatch.context() as dying:
        dying.setattr(conversion_module, "pause_point", killed)
        dying.setattr(commits_module, "pause_point", killed)
        with pytest.raises(KeyboardInterrupt):
            cli.main(command)
    assert (loads.lake_dir / "orders" / "metadata").is_dir() is (point == "committed")

    assert cli.main(command) == 0

    converted = loads.iceberg_table().scan().to_arrow()
    assert rows_by(converted, ["id", "note", "_batch"]) == before
    assert not list((loads.lake_dir / "orders").glob("part-*.parquet"))
    change_orders(pg, 1)
    after = loads.run()
    assert after.success, after.failure
    assert after.metadata["full_refresh"] is False


@pytest.mark.xdist_group("connect")
def test_a_commit_refused_before_the_catalog_took_it_says_its_cause(
    loads: Loads,
    pg: Schema,
    connect: str,
    spark: SparkSession,
) -> None:
    """Defect 8: a failure before the catalog was asked was reported as "whether the catalog
    took it could not be told". Here the run's branch is dropped under it before main moves."""
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    assert loads.run().success
    change_orders(pg, 1)
    writer, marker = loads.paused_run("mid-commit", remote=connect)
    lake = _lake(loads)
    state = lake.state()
    assert state is not None
    (branch,) = [name for name in state.refs if name.startswith("ia-")]
    lake.session(spark).sql(f"ALTER TABLE {lake.reference()} DROP BRANCH `{branch}`")

    marker.unlink()
    _, stderr = writer.communicate(timeout=300)

    assert writer.returncode != 0
    assert "could not be told" not in stderr
    assert "Nothing was committed and the cursor did not move" in stderr
    assert branch in stderr or "branch" in stderr.lower()


def test_a_catalog_that_stops_answering_after_the_commit_leaves_the_run_recorded(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defect 9: a catalog hiccup while counting rows after a landed commit reported "Nothing was
    written". Now the count comes from the commit's own snapshot, and maintenance that can't
    read the catalog says so without failing the run."""
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_MERGE, lake=ICEBERG)
    assert loads.run().success
    change_orders(pg, 1)
    publish = commits_module._published
    read_state = table_module.read_state  # type: ignore[attr-defined]
    down = {"after": False}

    def published(*args: Any) -> Any:
        outcome = publish(*args)
        down["after"] = True
        return outcome

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        if down["after"]:
            from incremental_assets.errors import WriteError

            raise WriteError("the catalog is unreachable")
        return read_state(*args, **kwargs)

    monkeypatch.setattr(commits_module, "_published", published)
    monkeypatch.setattr(table_module, "read_state", unreachable)

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["dagster/row_count"] == len(orders_held(pg))
    monkeypatch.undo()
    table = loads.iceberg_table()
    assert run.metadata["iceberg_snapshot_id"] == table.current_snapshot().snapshot_id


@pytest.mark.parametrize("other", ["append", "delete"])
def test_another_writers_commit_is_refused_by_a_run_and_replaced_by_a_full_refresh(
    loads: Loads,
    pg: Schema,
    other: str,
) -> None:
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    assert loads.run().success
    table = loads.iceberg_table()
    if other == "append":
        table.append(table.scan(limit=1).to_arrow())
    else:
        table.delete("id = 1")
    change_orders(pg, 1)

    refused = loads.run()
    rebuilt = loads.run(full_refresh=True)

    assert not refused.success
    assert "not the table the stored cursor describes" in (refused.failure or "")
    assert "--full" in (refused.failure or "")
    assert rebuilt.success, rebuilt.failure
    assert loads.rows(["id", "note"]) == orders_held(pg)


def test_the_catalogs_password_is_in_no_message(loads: Loads, pg: Schema) -> None:
    create_orders(pg, 5)
    secret = "Wh1sper-0f-the-catalog"
    uri = f"postgresql+psycopg2://etl:{secret}@127.0.0.1:1/catalog"  # nothing listens on port 1
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "catalog": {"type": "sql", "uri": uri}})

    run = loads.run()

    assert not run.success
    assert "catalog" in (run.failure or "") and "127.0.0.1:1" in (run.failure or "")
    logged = [
        str(record.dagster_event or record.user_message)
        for record in loads.instance.all_logs(run.run_id)
    ]
    assert secret not in (run.failure or "")
    assert not [line for line in logged if secret in line]


@pytest.mark.parametrize("nothing_new", [True, False])
def test_a_lake_copied_to_another_folder_is_refused_as_moved_and_rebuilt_there_by_a_full_refresh(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    nothing_new: bool,
) -> None:
    """The copy's catalog names the old folder's metadata (Iceberg's locations are absolute):
    run there, it would add to the old folder's table. Refused on both paths, with or without
    Spark; the full refresh builds the table in the new folder and leaves the old one alone."""
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_APPEND, lake=ICEBERG)
    assert loads.run().success
    old = sorted(p.name for p in (tmp_path / "lake" / "orders" / "metadata").iterdir())
    shutil.copytree(tmp_path / "lake", tmp_path / "lake2")
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "path": str(tmp_path / "lake2")})
    if not nothing_new:
        change_orders(pg, 1)

    refused = loads.run()
    rebuilt = loads.run(full_refresh=True)

    assert not refused.success
    assert str(tmp_path / "lake" / "orders") in (refused.failure or "")
    assert "moved" in (refused.failure or "")
    assert rebuilt.success, rebuilt.failure
    assert loads.lake_dir == tmp_path / "lake2"
    assert loads.rows(["id", "note"]) == orders_held(pg)
    assert sorted(p.name for p in (tmp_path / "lake" / "orders" / "metadata").iterdir()) == old
    location = loads.iceberg_table().metadata.location
    assert str(tmp_path / "lake2" / "orders") in location


@pytest.mark.xdist_group("connect")
def test_a_commit_refused_after_a_compaction_says_the_table_was_compacted(
    loads: Loads, pg: Schema, connect: str
) -> None:
    """The review's finding: a run whose table was compacted while it computed (another
    engine's maintenance) was refused naming its own base snapshot as "the other writer"."""
    create_orders(pg, 40)
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "maintenance": "off"})
    assert loads.run().success
    change_orders(pg, 1)
    assert loads.run().success  # two batches' files: something to compact
    change_orders(pg, 2)
    writer, marker = loads.paused_run("staged", remote=connect)
    assert "data files rewritten" in loads.compact()

    marker.unlink()
    _, stderr = writer.communicate(timeout=300)

    assert writer.returncode != 0
    assert "was compacted (snapshot" in stderr and "no row changed" in stderr
    assert "another writer committed" not in stderr
    assert "run again: it reads the compacted table" in stderr
    rerun = loads.run()
    assert rerun.success, rerun.failure
    held = loads.rows(["id", "note", "updated_at"])
    assert len(held) == len(set(held))  # every version once
    assert set(pg.query("SELECT id, note, updated_at FROM orders")) <= set(held)


def _foreign_insert(loads: Loads, spark: SparkSession, id_: int) -> None:
    """Another engine's INSERT into main: one row the source never had."""
    lake = _lake(loads)
    lake.session(spark).sql(
        f"INSERT INTO {lake.reference()} (id, note, updated_at, _batch) VALUES "
        f"({id_}, 'foreign', TIMESTAMP '2030-01-01 00:00:00', 0)"
    )


@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize("mode", ["merge", "append"])
def test_a_full_refresh_never_erases_a_commit_that_landed_while_it_ran(
    loads: Loads, pg: Schema, connect: str, spark: SparkSession, mode: str
) -> None:
    """The review's finding: a full refresh checked main before its job, and Iceberg's
    `CREATE OR REPLACE` committed over whatever landed meanwhile: another writer's INSERT was
    told it succeeded, then vanished. A full refresh of a table whose columns and partitioning
    stay is now made on the run's branch, and `main` moves to it only if it didn't move."""
    create_orders(pg, 30)
    loads.configure(pg, {**ORDERS_APPEND, "mode": mode}, lake={**ICEBERG, "maintenance": "off"})
    assert loads.run().success
    writer, marker = loads.paused_run("mid-commit", remote=connect, full_refresh=True)
    _foreign_insert(loads, spark, 10_000)

    marker.unlink()
    _, stderr = writer.communicate(timeout=300)

    assert writer.returncode != 0
    assert "another writer committed" in stderr and "made by another engine" in stderr
    assert (10_000, "foreign") in loads.rows(["id", "note"])


@pytest.mark.xdist_group("connect")
def test_a_full_refresh_that_must_replace_the_table_fails_naming_a_commit_it_replaced(
    loads: Loads, pg: Schema, connect: str, spark: SparkSession
) -> None:
    """Where the table itself must be replaced (here a column's type changes), Iceberg's
    replace commits over a commit that landed meanwhile: the run finds it after the fact and
    fails, naming the commit, instead of reporting success."""
    create_orders(pg, 30)
    loads.configure(pg, ORDERS_APPEND, lake={**ICEBERG, "maintenance": "off"})
    assert loads.run().success
    pg.execute("ALTER TABLE orders ALTER COLUMN note TYPE varchar(20)")  # same type in the lake
    pg.execute("ALTER TABLE orders ADD COLUMN n integer NOT NULL DEFAULT 1")
    pg.execute("ALTER TABLE orders DROP COLUMN n")
    pg.execute("ALTER TABLE orders ALTER COLUMN id TYPE numeric(30, 0)")  # not promotable
    writer, marker = loads.paused_run("mid-commit", remote=connect, full_refresh=True)
    _foreign_insert(loads, spark, 10_000)
    lost = _lake(loads).state()
    assert lost is not None and lost.current_snapshot_id is not None

    marker.unlink()
    _, stderr = writer.communicate(timeout=300)

    assert writer.returncode != 0
    assert f"snapshot {lost.current_snapshot_id}, committed by another engine" in stderr
    assert f"VERSION AS OF {lost.current_snapshot_id}" in stderr
    assert "the next run repeats its full refresh" in stderr
    rerun = loads.run()
    assert rerun.success, rerun.failure
    assert rerun.metadata["full_refresh"] is True
