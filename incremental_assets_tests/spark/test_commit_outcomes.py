"""What becomes of a run's Iceberg commit when production gets in its way (`commits.apply`,
`load._failed_write`), on a real local Iceberg table: a fast-forward whose answer is lost keeps
its branch and fails as unknown; a `CREATE OR REPLACE` over another writer's commit is refused,
naming it; a table made before the catalog stopped answering is said to have landed; a branch
the catalog made though its answer was lost is dropped; a rerun counts the files its append
wrote; an empty append with a new column still commits; a merge with nothing to change makes no
branch. (Each was found by breaking the commit rebuilt as a value, red before its fix.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from incremental_assets import load as load_module
from incremental_assets.config import LakeSpec, Mode
from incremental_assets.errors import CommitUnknown, ConcurrentRunError, WriteError
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg import commits as commits_module
from incremental_assets.lake.iceberg import table as table_module
from incremental_assets.lake.iceberg.records import branch_name
from incremental_assets.writers.schema import plan_schema_change
from incremental_assets_tests.support.java_failures import SparkFailure, chain
from incremental_assets_tests.support.plans import lake_write_plan as _plan
from incremental_assets_tests.support.plans import written as _write

SCHEMA = "id long, v string, c long, gone boolean"

# Iceberg's CommitStateUnknownException: its cause's message, then COMMON_INFO. A catalog whose
# connection dropped mid-commit (JDBC catalog, Hive metastore, REST) puts "Socket closed" there.
_COMMON_INFO = (
    "Cannot determine whether the commit was successful or not, the underlying data files may "
    "or may not be needed."
)


def _socket_closed_unknown() -> SparkFailure:
    return SparkFailure(
        "An error occurred while calling o321.collectToPython.\n: "
        "org.apache.iceberg.exceptions.CommitStateUnknownException: Socket closed\n" + _COMMON_INFO,
        chain(
            ("CommitStateUnknownException", f"Socket closed\n{_COMMON_INFO}"),
            ("SQLException", "An I/O error occurred while sending to the backend."),
            ("SocketException", "Socket closed"),
        ),
    )


def _lake(tmp_path: Path) -> IcebergLake:
    lake = open_lake(LakeSpec(path=str(tmp_path), format="iceberg"), "orders")
    assert isinstance(lake, IcebergLake)
    return lake


def _branches(lake: IcebergLake) -> list[str]:
    state = lake.state()
    return [] if state is None else [n for n in state.refs if n.startswith("ia-")]


def _failed(lake: IcebergLake, txn: str, exc: Exception) -> Exception:
    """What `load.failed_write` makes of a failed commit (the table as far as it reads it)."""
    table = SimpleNamespace(name="orders")
    return load_module.failed_write(table, lake, txn, exc)  # type: ignore[arg-type]


def _first(
    spark: SparkSession,
    lake: IcebergLake,
    mode: Mode = Mode.APPEND,
    rows: list[tuple[Any, ...]] | None = None,
) -> None:
    """The table's first load: `rows`, or two rows."""
    rows = rows or [(1, "a", 10, None), (2, "b", 10, None)]
    _write(mode, spark, spark.createDataFrame(rows, SCHEMA), _plan(lake, 1, replace_all=True))


def test_a_fast_forward_whose_outcome_is_unknown_keeps_its_branch_and_fails_as_unknown(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's answer to the fast-forward is lost (its connection closed): whether main
    moved can't be told, so the branch must stay (the catalog may still apply the commit) and
    the run must fail as a commit whose outcome is unknown (`lake.unfinished_error`)."""
    lake = _lake(tmp_path)
    _first(spark, lake, rows=[(1, "a", 10, None)])
    real_sql = SparkSession.sql

    def sql(self: SparkSession, statement: str, *args: Any, **kwargs: Any) -> DataFrame:
        if "fast_forward" in statement:
            raise _socket_closed_unknown()
        return real_sql(self, statement, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", sql)
    plan = _plan(lake, 2)

    with pytest.raises(Exception) as raised:
        _write(Mode.APPEND, spark, spark.createDataFrame([(2, "b", 20, None)], SCHEMA), plan)
    monkeypatch.undo()

    failure = _failed(lake, plan.txn, raised.value)
    said = f"{type(raised.value).__name__} -> {type(failure).__name__}: {failure}"
    assert branch_name(plan.txn) in _branches(lake), f"the branch was dropped; {said}"
    assert isinstance(raised.value, CommitUnknown), said
    assert "could not be told" in str(failure), said


def test_a_replace_over_another_writers_commit_fails_naming_that_commit(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full refresh whose columns change is Iceberg's CREATE OR REPLACE, which commits over an
    INSERT another engine made meanwhile: the run must fail as `replaced_over` says (naming the
    lost snapshot, "the next run repeats its full refresh"), as the old code did. Its snapshot
    is on main, so the new `discard` says it landed and `_failed_write` turns the refusal into
    `unfinished_error`'s "reading the table back failed", which says the opposite."""
    lake = _lake(tmp_path)
    _first(spark, lake, rows=[(1, "a", 10, None)])
    other = lake.session(spark.newSession())  # another writer: none of this run's summary
    real_pause = commits_module.pause_point  # type: ignore[attr-defined]

    def meanwhile(name: str) -> None:
        if name == "mid-commit":
            other.sql(
                f"INSERT INTO {lake.reference()} (id, v, c, gone, _batch) "
                "VALUES (10000, 'foreign', 1, NULL, 0)"
            )
        real_pause(name)

    monkeypatch.setattr(commits_module, "pause_point", meanwhile)
    plan = _plan(lake, 2, replace_all=True)
    wider = spark.createDataFrame(
        [(2, "b", "20", None)], "id long, v string, c string, gone boolean"
    )

    with pytest.raises(ConcurrentRunError) as raised:
        _write(Mode.APPEND, spark, wider, plan)
    monkeypatch.undo()

    assert "committed by another engine" in str(raised.value)
    failure = _failed(lake, plan.txn, raised.value)
    assert isinstance(failure, ConcurrentRunError), f"{type(failure).__name__}: {failure}"
    assert "reading the table back failed" not in str(failure)


def test_a_first_load_that_landed_before_the_catalog_stopped_answering_says_it_landed(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's CREATE TABLE AS SELECT returned: the catalog took the table. Reading it back then
    fails. The old commit knew it had landed ("this run's snapshot is the table's now"); the new
    one raises CommitUnknown, and `unfinished_error`, unable to read the catalog, says whether it
    landed "could not be told" and that "the run's branch (ia-...) is kept": there is none."""
    lake = _lake(tmp_path)
    create, read_state = commits_module._create, table_module.read_state  # type: ignore[attr-defined]
    down = {"now": False}

    def created(*args: Any, **kwargs: Any) -> None:
        create(*args, **kwargs)
        down["now"] = True

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        if down["now"]:
            raise WriteError("the catalog is unreachable")
        return read_state(*args, **kwargs)

    monkeypatch.setattr(commits_module, "_create", created)
    monkeypatch.setattr(table_module, "read_state", unreachable)
    plan = _plan(lake, 1, replace_all=True)

    with pytest.raises(WriteError) as raised:
        _write(Mode.APPEND, spark, spark.createDataFrame([(1, "a", 10, None)], SCHEMA), plan)
    failure = str(_failed(lake, plan.txn, raised.value))
    monkeypatch.undo()

    state = lake.state()
    assert state is not None and state.current_snapshot_id is not None  # it landed
    assert not _branches(lake)
    assert branch_name(plan.txn) not in failure, failure
    assert "could not be told" not in failure, failure


def test_a_branch_whose_creation_raised_after_the_catalog_took_it_is_dropped(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CREATE BRANCH raised, yet the catalog made the branch (its answer lost). The old commit
    named its branch before creating it, and `abandon` dropped it (DROP BRANCH IF EXISTS); the
    new `Branch` marks itself made only once the statement returned, so the failure leaves it."""
    lake = _lake(tmp_path)
    _first(spark, lake)
    real_sql = SparkSession.sql

    def sql(self: SparkSession, statement: str, *args: Any, **kwargs: Any) -> DataFrame:
        done = real_sql(self, statement, *args, **kwargs)
        if "CREATE BRANCH" in statement:
            raise RuntimeError("the catalog's answer was lost (connection reset)")
        return done

    monkeypatch.setattr(SparkSession, "sql", sql)
    plan = _plan(lake, 2)

    with pytest.raises(RuntimeError) as raised:
        _write(Mode.APPEND, spark, spark.createDataFrame([(3, "c", 20, None)], SCHEMA), plan)
    monkeypatch.undo()
    _failed(lake, plan.txn, raised.value)

    assert not _branches(lake)


def test_a_rerun_of_a_committed_batch_counts_the_files_its_append_wrote(
    spark: SparkSession, tmp_path: Path
) -> None:
    """files_written: the old writer counted the append's snapshot; the new one sums every
    snapshot on the branch, the rerun's DELETE (which rewrote the earlier batch's file) too."""
    lake = _lake(tmp_path)
    _first(spark, lake, rows=[(1, "a", 10, None)])
    two = spark.createDataFrame([(2, "b", 20, None)], SCHEMA)
    _write(Mode.APPEND, spark, two, _plan(lake, 2))
    # Compacted: batch 1's and batch 2's rows in one file, as maintenance leaves them.
    lake.session(spark).sql(
        f"CALL {lake.catalog.name}.system.rewrite_data_files(table => "
        f"'{lake.procedure_table()}', options => map('rewrite-all', 'true'))"
    ).collect()

    rerun = _write(
        Mode.APPEND,
        spark,
        spark.createDataFrame([(2, "b", 20, None), (3, "c", 21, None)], SCHEMA),
        _plan(lake, 2),
    )

    assert sorted(r.id for r in lake.rows(spark, None).collect()) == [1, 2, 3]
    state = lake.state()
    assert state is not None and state.current is not None
    appended = int(state.current.summary["added-data-files"])  # the rerun's append snapshot
    assert rerun.files_written == appended, (rerun.files_written, appended)


def test_an_append_of_no_rows_with_a_new_column_still_commits(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = _lake(tmp_path)
    _first(spark, lake)
    source = "id long, v string, c long, gone boolean, extra string"
    facts = lake.facts()
    change = plan_schema_change("orders", facts.schema, spark.createDataFrame([], source).schema)
    before = lake.state()
    assert before is not None

    outcome = _write(
        Mode.APPEND, spark, spark.createDataFrame([], source), _plan(lake, 2, schema=change)
    )

    after = lake.state()
    assert after is not None and outcome.head is not None
    assert after.current_snapshot_id != before.current_snapshot_id
    assert outcome.head.snapshot_id == after.current_snapshot_id
    assert "extra" in lake.rows(spark, None).columns
    assert not _branches(lake)


def test_a_merge_with_nothing_to_change_makes_no_branch_and_no_snapshot(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = _lake(tmp_path)
    _first(spark, lake, Mode.MERGE)
    before = lake.state()
    assert before is not None
    made: list[str] = []
    real_sql = SparkSession.sql

    def sql(self: SparkSession, statement: str, *args: Any, **kwargs: Any) -> DataFrame:
        if "CREATE BRANCH" in statement:
            made.append(statement)
        return real_sql(self, statement, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", sql)
    outcome = _write(
        Mode.MERGE, spark, spark.createDataFrame([(1, "a", 10, None)], SCHEMA), _plan(lake, 2)
    )
    monkeypatch.undo()

    after = lake.state()
    assert after is not None and outcome.head is None and not made
    assert after.snapshots.keys() == before.snapshots.keys()
