"""Keeping an Iceberg table fast to read and cheap to commit as it ages: Iceberg's Spark
procedures, run when they are due, never in a reader's way.

    compact   a merge-on-read table's data files whose rows its delete files mostly removed, and
              small files, rewritten (`rewrite_data_files`, dangling deletes dropped), then its
              delete files and manifests (`rewrite_position_delete_files`, `rewrite_manifests`);
              due past `deleted_fraction`, `delete_files` or `small_files`
    expire    snapshots past both a count and an age (`lake.keep_snapshots`,
              `lake.keep_snapshots_for`): a reader's snapshot, or the `iceberg_snapshot_id` a
              materialization recorded, stays readable at least that long; the files only
              expired snapshots held are deleted
    orphans   files in the table's folder that no snapshot names (a killed writer's) and that are
              older than `ORPHAN_AGE` (a live writer's are younger), listed through the table's
              FileIO (`remove_orphan_files` with `prefix_listing`, on a local disk as on an
              object store); due once a day, whatever the rate of commits: `ORPHANS_EVERY`
              after the last sweep, and on a table never swept once it is past its first day
              (its first snapshot a day old, or already expired), never at its first commit

Compaction makes a `replace` snapshot: the rows are the same, and the head runs check (the last
snapshot of ours) looks past it. Metadata files are deleted as commits replace them, past the
newest 100 (`write.metadata.previous-versions-max`).

`due` is a pure function of the table's metadata and the clock: a run that has nothing to do
pays for the metadata read it makes anyway.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from incremental_assets.lake.iceberg.records import (
    PREFIX,
    SnapshotInfo,
    TableState,
    deletes_of,
    head_snapshot,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Task = Literal["compact", "expire", "orphans"]
# A file younger than this may be a live writer's, not an orphan (Iceberg's own default).
ORPHAN_AGE = timedelta(days=3)
# Once a day on a daily schedule too: a sweep that starts a little earlier than yesterday's is due.
ORPHANS_EVERY = timedelta(hours=23)
ORPHANS_SWEPT = PREFIX + "orphans-swept-at"  # table property: when orphans were last removed
_EPOCH = datetime(1970, 1, 2, tzinfo=UTC)
EXPIRE_AT_ONCE = 1000  # snapshot ids per `expire_snapshots` call


@dataclass(frozen=True)
class Policy:
    """When each task is due."""

    keep_snapshots: int
    keep_snapshots_for: timedelta
    deleted_fraction: float = 0.1  # compact when deletes remove this share of the rows read
    delete_files: int = 32  # ... or when the table holds this many delete files
    small_files: int = 64  # ... or this many data files averaging under SMALL_FILE bytes
    small_file_bytes: int = 32 << 20


@dataclass(frozen=True)
class Target:
    """The table maintained: its catalog, as procedures take it (`catalog.ns.table`), and as SQL
    names it (quoted)."""

    catalog: str
    table: str
    reference: str


@dataclass(frozen=True)
class Maintenance:
    """What a table's maintenance did, for the run's metadata."""

    done: dict[str, str] = field(default_factory=dict)  # task -> what it did
    seconds: float = 0.0

    def describe(self) -> str:
        return "; ".join(f"{task}: {what}" for task, what in self.done.items()) + (
            f" ({self.seconds:.1f}s)"
        )


def due(state: TableState, policy: Policy, now: datetime) -> list[Task]:
    """The tasks due now, in the order they run."""
    tasks: list[Task] = []
    if compaction_due(state, policy):
        tasks.append("compact")
    if expiring(state, policy.keep_snapshots, policy.keep_snapshots_for, now):
        tasks.append("expire")
    if orphans_due(state, now):
        tasks.append("orphans")
    return tasks


def orphans_due(state: TableState, now: datetime) -> bool:
    """Whether the orphan sweep is due: `ORPHANS_EVERY` after the last one; on a table never
    swept, once it is past its first day: its first snapshot is that old, or is gone (the oldest
    one kept is not the table's first commit). Not by the age of the oldest snapshot kept, which
    stays younger than `ORPHAN_AGE` on a table that commits faster than its snapshots expire."""
    swept = state.properties.get(ORPHANS_SWEPT)
    if swept is not None:
        return now - datetime.fromisoformat(swept) >= ORPHANS_EVERY
    oldest = min(state.snapshots.values(), key=_order, default=None)
    if oldest is None:
        return False
    return oldest.sequence_number > 1 or now - _at(oldest.timestamp_ms) >= ORPHANS_EVERY


def compaction_due(state: TableState, policy: Policy) -> bool:
    current = state.current
    if current is None:
        return False
    summary = current.summary
    deletes = deletes_of(current)
    files = int(summary.get("total-data-files", 0))
    size = int(summary.get("total-files-size", 0))
    return (
        (deletes.fraction > 0 and deletes.fraction >= policy.deleted_fraction)
        or deletes.files >= policy.delete_files
        or (files >= policy.small_files and size < files * policy.small_file_bytes)
    )


def expiring(state: TableState, keep: int, keep_for: timedelta, now: datetime) -> list[int]:
    """The snapshots past both limits: at least `keep` newer snapshots of main's, and older than
    `keep_for`. Main's are every snapshot it has been at (the snapshot log), the history a full
    refresh's `CREATE OR REPLACE` replaced included: Iceberg's own `retain_last` counts only the
    current snapshot's ancestors, so the replaced history would expire on age alone. A run's
    abandoned branch never counts as a newer one. Kept whatever their age: main's snapshots down
    to the head (the last commit of ours, whose summary the next run reads, and the compactions
    after it), by ancestry, not by clock, and every branch's or tag's own."""
    head = head_snapshot(state)
    ancestry = [s.snapshot_id for s in state.ancestry()]
    down_to_head = ancestry[: ancestry.index(head.snapshot_id) + 1] if head else ancestry[:1]
    kept = {*state.refs.values(), state.current_snapshot_id, *down_to_head}
    mains = {*state.main_history, *ancestry}
    older_than = now - keep_for

    main_orders = sorted(_order(state.snapshots[s]) for s in mains if s in state.snapshots)
    return [
        s.snapshot_id
        for s in sorted(state.snapshots.values(), key=_order, reverse=True)
        if len(main_orders) - bisect_right(main_orders, _order(s)) >= keep
        and _at(s.timestamp_ms) < older_than
        and s.snapshot_id not in kept
    ]


def maintain(
    spark: SparkSession,
    target: Target,
    state: TableState,
    tasks: list[Task],
    policy: Policy,
    now: datetime,
) -> Maintenance:
    """Run `tasks` on the table, in order."""
    started = time.monotonic()
    # Chosen before compaction adds its snapshots, which are newer than any of these.
    expired = expiring(state, policy.keep_snapshots, policy.keep_snapshots_for, now)
    steps: dict[Task, Callable[[], str]] = {
        "compact": lambda: _compact(spark, target, policy),
        "expire": lambda: _expire(spark, target, expired),
        "orphans": lambda: _remove_orphans(spark, target, now),
    }
    done: dict[str, str] = {task: steps[task]() for task in tasks}
    return Maintenance(done=done, seconds=time.monotonic() - started)


def _call(
    spark: SparkSession, target: Target, procedure: str, arguments: str = ""
) -> dict[str, object]:
    row = spark.sql(
        f"CALL {target.catalog}.system.{procedure}(table => '{target.table}'{arguments})"
    ).first()
    return row.asDict() if row is not None else {}


def _compact(spark: SparkSession, target: Target, policy: Policy) -> str:
    options = (
        f", options => map('delete-ratio-threshold', '{policy.deleted_fraction}', "
        "'min-input-files', '2', 'remove-dangling-deletes', 'true')"
    )
    data = _call(spark, target, "rewrite_data_files", options)
    deletes = _call(spark, target, "rewrite_position_delete_files")
    manifests = _call(spark, target, "rewrite_manifests")
    return (
        f"{data.get('rewritten_data_files_count', 0)} data files rewritten into "
        f"{data.get('added_data_files_count', 0)}, "
        f"{data.get('removed_delete_files_count', 0)} delete files dropped, "
        f"{deletes.get('rewritten_delete_files_count', 0)} delete files compacted, "
        f"{manifests.get('rewritten_manifests_count', 0)} manifests rewritten"
    )


def apply_deletes(spark: SparkSession, target: Target) -> str:
    """Every data file that deletes apply to rewritten without its deleted rows, and the deletes
    dropped: a copy-on-write merge rewrites the files it changes and leaves the position deletes
    earlier merges wrote for them behind, still counted in the table's totals."""
    options = ", options => map('delete-file-threshold', '1', 'remove-dangling-deletes', 'true')"
    data = _call(spark, target, "rewrite_data_files", options)
    return (
        f"{data.get('rewritten_data_files_count', 0)} data files rewritten without their "
        f"deleted rows, {data.get('removed_delete_files_count', 0)} delete files dropped"
    )


def _expire(spark: SparkSession, target: Target, expired: list[int]) -> str:
    # Only the snapshots named: with `older_than` at the epoch, Iceberg's own rule (main's
    # `retain_last` ancestors, anything newer than the age) keeps every other one. In calls of
    # EXPIRE_AT_ONCE, so a long-unkept table doesn't make one statement of every id.
    deleted = 0
    for start in range(0, len(expired), EXPIRE_AT_ONCE):
        ids = ", ".join(
            f"{snapshot_id}L" for snapshot_id in expired[start : start + EXPIRE_AT_ONCE]
        )
        counts = _call(
            spark,
            target,
            "expire_snapshots",
            f", older_than => TIMESTAMP '{_stamp(_EPOCH)}', retain_last => 1, "
            f"snapshot_ids => array({ids})",
        )
        deleted += sum(int(str(v or 0)) for k, v in counts.items() if k.startswith("deleted_"))
    return f"expired {len(expired)} snapshots, deleted {deleted} files"


def _remove_orphans(spark: SparkSession, target: Target, now: datetime) -> str:
    # Listed through the table's FileIO, as Iceberg reads and writes it: Hadoop's file systems,
    # which the default listing takes, have no `s3://` (S3FileIO's). Hidden files (`_lock`)
    # are skipped either way.
    found = spark.sql(
        f"CALL {target.catalog}.system.remove_orphan_files(table => '{target.table}', "
        f"older_than => TIMESTAMP '{_stamp(now - ORPHAN_AGE)}', prefix_listing => true)"
    ).collect()
    spark.sql(
        f"ALTER TABLE {target.reference} SET TBLPROPERTIES ('{ORPHANS_SWEPT}' = "
        f"'{now.isoformat()}')"
    )
    return f"removed {len(found)} orphan files"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"


def _order(snapshot: SnapshotInfo) -> tuple[int, int]:
    """The order the table's commits made the snapshot in."""
    return snapshot.sequence_number, snapshot.timestamp_ms


def _at(timestamp_ms: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC)
