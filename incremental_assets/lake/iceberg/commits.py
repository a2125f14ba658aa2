"""One run's commit to an Iceberg table, carried out by Spark: `apply` takes the plan
(`commit_plan.py`) and the run's rows, and returns what became of them (`Landed`, `Unchanged`,
`Conflict`, `Unknown`: a branch is dropped unless the catalog may have taken its commit).

A run's snapshots are made on its own branch `ia-<txn>` at the snapshot it read, then main is
moved to it with `fast_forward`, which Iceberg refuses unless main is still there: so each run
adds its snapshots to main, or none, and readers see main before or after. A replacement of the
whole table is a branch commit too where the table's columns stay; otherwise it is Iceberg's
`CREATE OR REPLACE`, which commits over whatever landed, so a commit it replaced is found after
the fact and refused (`conflicts.replaced_over`). A run that dies leaves its branch, which the
next commit drops once it is a day old (a younger one may be a live run's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.engine_failures import Failure, classify
from incremental_assets.errors import CommitUnknown, ConcurrentRunError, TableProblem, WriteError
from incremental_assets.lake.facts import LakeHead
from incremental_assets.lake.iceberg.branch import Branch, OnBranch, Whole
from incremental_assets.lake.iceberg.commit_plan import (
    CommitPlan,
    Conflict,
    Landed,
    Outcome,
    Replacement,
    Unchanged,
    Unknown,
)
from incremental_assets.lake.iceberg.conflicts import Named, moved_under, replaced_over
from incremental_assets.lake.iceberg.maintenance import apply_deletes
from incremental_assets.lake.iceberg.partitions import evolution
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import (
    SnapshotInfo,
    TableState,
    head_at,
    landed,
    made_by,
    our_branches,
)
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.lake.names import txn_time
from incremental_assets.pause_points import pause_point
from incremental_assets.spark_api import F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A branch left younger than this may be a live run's (without the lock, runs can overlap).
DEAD_BRANCH_AGE = timedelta(days=1)
_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."


class _Refused(Exception):
    def __init__(self, error: ConcurrentRunError) -> None:
        self.error = error


def apply(
    lake: IcebergLake, spark: SparkSession, plan: CommitPlan, change: OnBranch | Whole
) -> Outcome:
    """Carry `plan` out with the run's rows; the outcome says whether main holds them."""
    session = lake.session(spark)
    try:
        if plan.stale:
            raise _Refused(_moved(lake, plan.base))
        replacement = plan.replacement
        if replacement is not None and not replacement.in_place:
            assert isinstance(change, Whole)
            return _recreated(lake, session, plan, replacement, change.rows)
        if isinstance(change, Whole):
            frame = change.rows

            def overwrite(branch: Branch) -> bool:
                frame.writeTo(branch.reference).overwrite(F.lit(True))
                return True

            change = OnBranch(overwrite)
        return _on_branch(lake, session, plan, change)
    except _Refused as refused:
        return Conflict(refused.error)
    except CommitUnknown as unknown:
        return Unknown(unknown.cause, unknown.landed)


def _on_branch(
    lake: IcebergLake, spark: SparkSession, plan: CommitPlan, change: OnBranch
) -> Outcome:
    base = _prepared(lake, spark, plan, change)
    _drop_dead_branches(lake, spark, plan.txn)
    branch = Branch(lake, spark, plan.txn, base)
    try:
        with summarized(spark, plan.summary):
            wanted = change.write(branch)
        if not branch.made:
            return Unchanged()
        state = lake.state()
        snapshots = _made_on(lake, state, plan.branch, base)
    except Exception:
        if branch.made:
            _drop_branch(lake, spark, plan.branch)
        raise
    if not wanted or not snapshots:
        _drop_branch(lake, spark, plan.branch)
        if plan.replacement is not None:  # an overwrite always makes a snapshot: main moved
            raise _Refused(_moved(lake, base))
        return Unchanged()
    assert state is not None
    return _published(
        lake, spark, plan, base, Landed(_head(state, snapshots[-1]), snapshots, state.properties)
    )


def _prepared(
    lake: IcebergLake, spark: SparkSession, plan: CommitPlan, change: OnBranch
) -> int | None:
    """The table brought to the plan before the run's snapshots: its properties, its deletes
    applied, its columns changed or its rows rewritten to new types. The snapshot main must
    still be at: the plan's, or the one this commit's own rewrite made."""
    table, base = lake.reference(), plan.base
    if plan.properties:
        listed = ", ".join(f"'{k}'='{v}'" for k, v in plan.properties.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({listed})")
    if plan.apply_deletes:
        apply_deletes(spark, lake.target())
        base = _current(lake.state())
    for clause in plan.columns:
        spark.sql(f"ALTER TABLE {table} {clause}")
    replacement = plan.replacement
    if replacement is not None:
        for clause in replacement.partition:
            spark.sql(f"ALTER TABLE {table} {clause}")
    if plan.rewrite is not None:
        rows = change.cast(lake.rows(spark, base))
        rewrite = plan.rewrite.replacement
        _create(lake, spark, plan, rewrite, rows, plan.rewrite.summary, base)
        _partition(lake, spark, rewrite)
        rewritten = lake.state()
        made = _current(rewritten)
        if rewritten is not None and made is not None:
            _refuse_replaced_over(lake, rewritten, base, made)
        base = made
    return base


def _published(
    lake: IcebergLake, spark: SparkSession, plan: CommitPlan, base: int | None, landed_: Landed
) -> Outcome:
    """Main moved to the branch, if main is still where the branch began; the branch dropped.
    The head is the branch's snapshot: nothing is read once main has moved, so a catalog that
    stops answering then can't make a committed run look failed."""
    pause_point("mid-commit")
    try:
        spark.sql(
            f"CALL {lake.catalog.name}.system.fast_forward(table => "
            f"'{lake.procedure_table()}', branch => 'main', to => '{plan.branch}')"
        ).collect()
    except Exception as exc:
        refused = _after_failed(lake, spark, plan, base, exc)
        if refused is not None:
            return refused
    _drop_branch(lake, spark, plan.branch)
    try:  # the metadata file that has main at the snapshot, for readers
        state = lake.state()
    except WriteError:
        return replace(landed_, head=replace(landed_.head, metadata_location=None))
    location = state.metadata_location if state is not None else None
    return replace(landed_, head=replace(landed_.head, metadata_location=location))


def _after_failed(
    lake: IcebergLake, spark: SparkSession, plan: CommitPlan, base: int | None, exc: Exception
) -> Conflict | Unknown | None:
    """After a commit raised: None if it landed (only the answer was lost); a conflict if
    another writer moved main; unknown if the catalog said so or can't be read; else the cause
    raised, the commit surely not taken."""
    try:
        state = lake.state()
    except WriteError:
        return Unknown(exc)
    if state is not None and landed(state, plan.txn):
        return None
    if state is not None and plan.branch not in state.refs:
        raise _branch_gone(lake, plan.branch) from None
    failure = classify(exc)
    if _current(state) != base or failure is Failure.CONFLICT:
        _drop_branch(lake, spark, plan.branch)
        return Conflict(_moved(lake, base, state))
    if failure is Failure.UNKNOWN:
        return Unknown(exc)
    _drop_branch(lake, spark, plan.branch)
    raise exc


# -- a table made, or made again ------------------------------------------------------------


def _recreated(
    lake: IcebergLake,
    spark: SparkSession,
    plan: CommitPlan,
    replacement: Replacement,
    rows: DataFrame,
) -> Outcome:
    """`CREATE [OR REPLACE] TABLE ... AS SELECT`, then the spec made the settings' for the
    writes after it; the head the run's commit made (another writer may have committed after)."""
    if replacement.forget:
        lake.forget()  # the lake's own catalog only; elsewhere it refuses
    _create(lake, spark, plan, replacement, rows, plan.summary, plan.base)
    try:
        _partition(lake, spark, replacement)
        state = lake.state()
    except WriteError as exc:  # the catalog stopped answering after it took the table
        raise CommitUnknown(exc, landed=True) from None
    head = made_by(state, plan.txn) if state is not None else None
    if state is None or head is None or head.snapshot_id is None:
        raise _Refused(_moved(lake, plan.base, state))
    _refuse_replaced_over(lake, state, plan.base, head.snapshot_id)
    return Landed(head, (state.snapshots[head.snapshot_id],), state.properties)


def _create(
    lake: IcebergLake,
    spark: SparkSession,
    plan: CommitPlan,
    replacement: Replacement,
    rows: DataFrame,
    summary: Mapping[str, str],
    base: int | None,
) -> None:
    namespace = ".".join(
        SPARK_SQL.quote(p) for p in [lake.catalog.name, *lake.namespace.split(".")]
    )
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    state = lake.state()
    exists = state is not None
    if exists and _current(state) != base:
        raise _Refused(_moved(lake, base, state))
    settings = replacement.created
    location = lake.uri if "://" in lake.uri else f"file:{lake.uri}"
    try:
        with summarized(spark, summary):
            pause_point("mid-commit")
            if settings.partitioning:
                _create_by_sql(lake, spark, plan, rows, settings, exists, location)
            else:
                # An action of `rows`' own, so that what it observes reaches the caller (a
                # Spark Connect client hears only its DataFrames' own actions' metrics).
                writer = rows.writeTo(lake.reference()).using("iceberg")
                for key, value in {**settings.properties, "location": location}.items():
                    writer = writer.tableProperty(key, value)
                writer.createOrReplace() if exists else writer.create()
    except Exception as exc:
        if classify(exc) is Failure.CONFLICT and not exists:
            raise _Refused(_moved(lake, base, lake.state())) from None
        try:
            now = lake.state()
        except WriteError:
            raise CommitUnknown(exc) from None
        if now is not None and landed(now, plan.txn):
            return
        if _current(now) != base:
            raise _Refused(_moved(lake, base, now)) from None
        if classify(exc) is Failure.UNKNOWN:
            raise CommitUnknown(exc) from None
        raise


def _create_by_sql(
    lake: IcebergLake,
    spark: SparkSession,
    plan: CommitPlan,
    rows: DataFrame,
    settings: TableSettings,
    exists: bool,
    location: str,
) -> None:
    """`CREATE [OR REPLACE] TABLE ... AS SELECT`, for partition transforms (`truncate`)
    DataFrameWriterV2 can't name."""
    verb = "CREATE OR REPLACE TABLE" if exists else "CREATE TABLE"
    properties = ", ".join(f"'{k}'='{v}'" for k, v in settings.properties.items())
    with Branch(lake, spark, plan.txn, plan.base).viewed(rows, "rows") as view:
        spark.sql(
            f"{verb} {lake.reference()} USING iceberg PARTITIONED BY "
            f"({', '.join(settings.partitioning)}) LOCATION '{location}' TBLPROPERTIES "
            f"({properties}) AS SELECT * FROM {view}"
        )


def _partition(lake: IcebergLake, spark: SparkSession, replacement: Replacement) -> None:
    """The spec of a table just made `replacement.wanted`, in place, if it was made otherwise."""
    if replacement.created.partitioning == replacement.wanted:
        return
    state = lake.state()
    assert state is not None
    for clause in evolution(state.partitioning, replacement.wanted):
        spark.sql(f"ALTER TABLE {lake.reference()} {clause}")


def _refuse_replaced_over(
    lake: IcebergLake, state: TableState, base: int | None, made: int
) -> None:
    refused = replaced_over(_named(lake), base, state, made)
    if refused is not None:
        raise _Refused(refused)


# -- summaries, states, branches --------------------------------------------------------------


@contextmanager
def summarized(spark: SparkSession, summary: Mapping[str, str]) -> Iterator[None]:
    """`summary` on every snapshot written meanwhile: Spark takes it from the session's
    configuration, for SQL statements as for DataFrame writes."""
    keys = [_SNAPSHOT_PROPERTY + key for key in summary]
    for key, value in summary.items():
        spark.conf.set(_SNAPSHOT_PROPERTY + key, value)
    try:
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)


def _made_on(
    lake: IcebergLake, state: TableState | None, branch: str, base: int | None
) -> tuple[SnapshotInfo, ...]:
    """The snapshots the write made on `branch` since `base`, oldest first."""
    if state is None or branch not in state.refs:
        raise _branch_gone(lake, branch)
    made = []
    for snapshot in state.ancestry(state.refs[branch]):
        if snapshot.snapshot_id == base:
            break
        made.append(snapshot)
    return tuple(reversed(made))


def _branch_gone(lake: IcebergLake, branch: str) -> WriteError:
    return WriteError(
        TableProblem(
            lake.table_name,
            f"this run's branch of the {lake.describe()} ({branch}) was dropped before main "
            "could move to it: by hand, or by another engine's maintenance. Nothing was "
            "committed and the cursor did not move.",
            fix="run again.",
        )
    )


def _head(state: TableState, snapshot: SnapshotInfo) -> LakeHead:
    return head_at(state.table_uuid, snapshot, state.metadata_location)


def _current(state: TableState | None) -> int | None:
    return state.current_snapshot_id if state is not None else None


def _named(lake: IcebergLake) -> Named:
    return Named(lake.table_name, lake.describe())


def _moved(
    lake: IcebergLake, base: int | None, state: TableState | None = None
) -> ConcurrentRunError:
    return moved_under(_named(lake), base, state if state is not None else lake.state())


def _drop_branch(lake: IcebergLake, spark: SparkSession, branch: str) -> None:
    with suppress(Exception):
        spark.sql(f"ALTER TABLE {lake.reference()} DROP BRANCH IF EXISTS {SPARK_SQL.quote(branch)}")


def _drop_dead_branches(lake: IcebergLake, spark: SparkSession, txn: str) -> None:
    state = lake.state()
    if state is None:
        return
    for branch, other in our_branches(state).items():
        if other != txn and _age(other) >= DEAD_BRANCH_AGE:
            _drop_branch(lake, spark, branch)


def _age(txn: str) -> timedelta:
    """How old one of our branches' commit ids is (`our_branches` yields only real ones)."""
    made = txn_time(txn)
    assert made is not None, txn
    return datetime.now(UTC) - made
