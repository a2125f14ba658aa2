"""What one run's commit will do to an Iceberg table, decided from the table's metadata before
Spark writes anything: pure, so every choice is tested without Spark (`test_commit_plan.py`).

    properties    the write properties the settings changed since the table was made
    apply_deletes a table whose merges now copy on write has its deletes applied first (its
                  merges would leave them behind, miscounting its rows)
    columns       new columns added and types widened, in place (no snapshot)
    rewrite       types Iceberg can't change in place: the table replaced by its own rows, cast
    replacement   a snapshot of the whole table: created, its rows overwritten on the run's
                  branch, or the table recreated (`CREATE OR REPLACE`)
    otherwise     the run's snapshots on its branch `ia-<txn>`, then main fast-forwarded to it

`base` is the snapshot main must still be at for the commit to land; `summary`, the summary
properties of every snapshot the run makes. `commits.apply` carries a plan out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.errors import CommitUnknown, ConcurrentRunError
from incremental_assets.lake.facts import LakeHead
from incremental_assets.lake.iceberg.partitions import consistent_with, evolution
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import (
    PREFIX,
    REWRITE,
    RUN_ID,
    SnapshotInfo,
    TableState,
    branch_name,
    deletes_of,
    head_snapshot,
)
from incremental_assets.lake.iceberg.schema import promotable, spark_schema, storable

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


@dataclass(frozen=True, kw_only=True)
class Replacement:
    """A snapshot of the whole table."""

    exists: bool  # a table is there to replace (else it is created)
    forget: bool  # the catalog names the table elsewhere: its entry dropped first (own catalog)
    # The columns stay as they are: the partition spec changed in place (these clauses), then
    # every row overwritten on the run's branch, which main moves to as any run's commit.
    in_place: bool
    partition: tuple[str, ...] = ()
    # Otherwise `CREATE [OR REPLACE] TABLE ... AS SELECT` with these settings (partitioned so no
    # field name of the table gets a second meaning), then the spec made `wanted` in place.
    created: TableSettings = field(default_factory=TableSettings)
    wanted: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Rewrite:
    """The table replaced by its own rows cast to the run's types, before the run's snapshot:
    in the partitioning it has, its snapshot carrying the head's records (no row changes)."""

    replacement: Replacement
    summary: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class CommitPlan:
    txn: str
    base: int | None  # the snapshot main must still be at
    summary: Mapping[str, str]
    properties: Mapping[str, str] = field(default_factory=dict)  # set first, where changed
    held_properties: Mapping[str, str] = field(default_factory=dict)  # the table's, after them
    apply_deletes: bool = False
    columns: tuple[str, ...] = ()  # `ALTER TABLE` clauses
    rewrite: Rewrite | None = None
    replacement: Replacement | None = None
    # Main already moved past `base` where the plan must act on it (its deletes): refused.
    stale: bool = False

    @property
    def branch(self) -> str:
        return branch_name(self.txn)


def plan_commit(
    state: TableState | None,
    *,
    txn: str,
    base: int | None,
    summary: Mapping[str, str],
    settings: TableSettings,
    columns: tuple[StructType, StructType] | None = None,
) -> CommitPlan:
    """A run's commit on its branch: the table's properties brought to `settings`, and
    `columns` (the lake's, the run's) evolved in place, or rewritten where Iceberg can't."""
    plan = CommitPlan(txn=txn, base=base, summary=summary)
    if state is None:
        return plan
    changed = settings.changes_to(state.properties, state.format_version)
    current = state.current
    deletes = settings.copy_on_write and current is not None and bool(deletes_of(current).files)
    plan = replace(
        plan,
        properties=changed,
        held_properties={**state.properties, **changed},
        apply_deletes=deletes,
        stale=deletes and current is not None and current.snapshot_id != base,
    )
    if columns is None:
        return plan
    clauses = column_changes(*columns)
    if clauses is not None:
        return replace(plan, columns=clauses)
    return replace(plan, rewrite=_rewrite(state, settings))


def plan_replacement(
    state: TableState | None,
    *,
    txn: str,
    base: int | None,
    summary: Mapping[str, str],
    settings: TableSettings,
    rows: StructType,
    misplaced: bool = False,
) -> CommitPlan:
    """A snapshot of the whole table made `rows`, partitioned as `settings` say: created, or
    replaced keeping its identity and older snapshots. A table whose columns stay has its spec
    changed in place and its rows overwritten on the branch, so main moves only if it is still
    at `base`; otherwise `CREATE OR REPLACE`, which Iceberg commits over whatever landed (a
    commit it replaced is found after the fact: `commits.apply`)."""
    if misplaced:
        state = None
    if state is not None and same_columns(state, rows):
        plan = plan_commit(state, txn=txn, base=base, summary=summary, settings=settings)
        clauses = tuple(evolution(state.partitioning, settings.partitioning))
        return replace(
            plan,
            replacement=Replacement(exists=True, forget=False, in_place=True, partition=clauses),
        )
    replacement = _recreated(state, settings, forget=misplaced)
    return CommitPlan(txn=txn, base=base, summary=summary, replacement=replacement)


def column_changes(lake: StructType, target: StructType) -> tuple[str, ...] | None:
    """The `ALTER TABLE` clauses that give a table of `lake`'s columns `target`'s: new columns
    added, types promoted; None if a type changes in a way only rewriting the rows can."""
    held = {f.name: f.dataType for f in lake.fields}
    clauses = []
    for column in target.fields:
        old = held.get(column.name)
        name = SPARK_SQL.quote(column.name)
        if old is None:
            clauses.append(f"ADD COLUMN {name} {column.dataType.simpleString()}")
        elif old != column.dataType:
            if not promotable(old, column.dataType):
                return None
            clauses.append(f"ALTER COLUMN {name} TYPE {column.dataType.simpleString()}")
    return tuple(clauses)


def same_columns(state: TableState, schema: StructType) -> bool:
    """Whether the table already has `schema`'s columns (names and types), so that its rows can
    be replaced without replacing the table."""
    if state.schema is None:
        return False
    held = [(f.name, f.dataType.simpleString()) for f in spark_schema(state.schema).fields]
    return held == [(f.name, storable(f.dataType).simpleString()) for f in schema.fields]


def _recreated(state: TableState | None, settings: TableSettings, forget: bool) -> Replacement:
    fields = state.partition_fields if state is not None else ()
    created = replace(settings, partitioning=consistent_with(settings.partitioning, fields))
    return Replacement(
        exists=state is not None,
        forget=forget,
        in_place=False,
        created=created,
        wanted=settings.partitioning,
    )


def _rewrite(state: TableState, settings: TableSettings) -> Rewrite:
    head = head_snapshot(state)
    summary = head.summary if head is not None else {}
    carried = {k: v for k, v in summary.items() if k.startswith(PREFIX) or k == RUN_ID}
    kept = replace(settings, partitioning=state.partitioning)
    return Rewrite(
        replacement=_recreated(state, kept, forget=False), summary={**carried, REWRITE: "types"}
    )


# -- what became of it ------------------------------------------------------------------


@dataclass(frozen=True)
class Landed:
    head: LakeHead
    snapshots: tuple[SnapshotInfo, ...]  # the run's, oldest first
    properties: Mapping[str, str] = field(default_factory=dict)  # the table's, as committed

    @property
    def snapshot(self) -> SnapshotInfo:
        return self.snapshots[-1]


@dataclass(frozen=True)
class Unchanged:
    pass


@dataclass(frozen=True)
class Conflict:
    error: ConcurrentRunError


@dataclass(frozen=True)
class Unknown:
    cause: Exception
    landed: bool = False  # the catalog took it; reading it back failed


Outcome = Landed | Unchanged | Conflict | Unknown


def settled(outcome: Outcome) -> Landed | None:
    """The landed commit (None: nothing was committed); a refused or unknown one raised."""
    match outcome:
        case Landed():
            return outcome
        case Unchanged():
            return None
        case Conflict(error):
            raise error
        case Unknown(cause, landed):
            raise CommitUnknown(cause, landed)
