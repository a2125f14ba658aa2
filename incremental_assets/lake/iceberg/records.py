"""What an Iceberg table says about this package's commits, read from its metadata: pure Python.

Every commit of ours writes, into its snapshot's summary, the run's commit id, batch and cursor,
the Dagster run, and the writers' records (the key rows are matched on, an append table's column
history, the batch of the last commit that replaced the table, the layout). So the snapshot a
reader time-travels to says which materialization made it, and a run reads all it needs about
the table from one metadata file:

* the head: the newest snapshot of ours on `main`, walking back over snapshots that rewrote
  files without changing a row (`replace`: compaction, rewritten manifests or deletes); a newer
  snapshot of any other kind that isn't ours is another writer's, and is the head as it is;
* the records, from the head's summary (tables committed before summaries carried them kept
  them as table properties);
* the branches our runs write to before `main` is moved to them (`ia-<commit id>`).

Both readers of the metadata (PyIceberg's, and the standard library's for a run with nothing
new) turn it into a `TableState` first, and everything here is a function of that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT, LakeFacts, LakeHead, Layout
from incremental_assets.lake.names import is_txn

PREFIX = "incremental-assets."
TXN, BATCH, CURSOR = PREFIX + "txn", PREFIX + "batch", PREFIX + "cursor"
LAYOUT = PREFIX + "layout"  # "merge" (rows matched on a key) or "batches" (append, full_refresh)
CONVERTED = PREFIX + "converted-from"  # the plain Parquet table a conversion made this one from
REWRITE = PREFIX + "rewrite"  # a commit that changed types without changing a row
RUN_ID = "dagster-run-id"
# The writers' records, by the name the plain format gives their files.
RECORDS = {KEY: PREFIX + "key", COLUMNS: PREFIX + "columns", SNAPSHOT: PREFIX + "snapshot"}
# Our runs' branches: `main` moves to one only if it is still where the branch started.
BRANCH_PREFIX = "ia-"
# Snapshots that rewrite files without changing the table's rows.
DATA_PRESERVING = "replace"


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    parent_id: int | None
    operation: str | None
    summary: Mapping[str, str]
    timestamp_ms: int
    sequence_number: int = 0  # the order of the table's commits (format v2 and later)

    @property
    def txn(self) -> str | None:
        """The commit id of ours the snapshot carries (None: another writer's, or maintenance)."""
        return self.summary.get(TXN)


@dataclass(frozen=True)
class TableState:
    """One metadata file of an Iceberg table, as far as this package reads it."""

    table_uuid: str
    location: str
    metadata_location: str
    current_snapshot_id: int | None
    snapshots: Mapping[int, SnapshotInfo] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    refs: Mapping[str, int] = field(default_factory=dict)  # branches and tags: their snapshot
    schema: Mapping[str, Any] | None = None  # the current schema, as the metadata file has it
    partitioning: tuple[str, ...] = ()  # the default partition spec, as Spark SQL spells it
    # Every spec's fields as (name, transform), the default spec's first, then the newest: a
    # table created again must not give a name another meaning (`partitions.consistent_with`).
    partition_fields: tuple[tuple[str, str], ...] = ()
    format_version: int = 2
    # Every snapshot main has been at, oldest first (the metadata's snapshot log): its ancestry,
    # and the history a full refresh's `CREATE OR REPLACE` replaced.
    main_history: tuple[int, ...] = ()

    @property
    def current(self) -> SnapshotInfo | None:
        if self.current_snapshot_id is None:
            return None
        return self.snapshots.get(self.current_snapshot_id)

    def ancestry(self, snapshot_id: int | None = None) -> list[SnapshotInfo]:
        """`snapshot_id` (by default main's) and its kept ancestors, newest first."""
        found, at = [], self.current_snapshot_id if snapshot_id is None else snapshot_id
        while at is not None and at in self.snapshots:
            found.append(self.snapshots[at])
            at = self.snapshots[at].parent_id
        return found


def state_from_json(metadata: Mapping[str, Any], metadata_location: str) -> TableState:
    """A metadata file's JSON as `TableState`."""
    snapshots = {
        int(s["snapshot-id"]): SnapshotInfo(
            snapshot_id=int(s["snapshot-id"]),
            parent_id=s.get("parent-snapshot-id"),
            operation=(s.get("summary") or {}).get("operation"),
            summary={str(k): str(v) for k, v in (s.get("summary") or {}).items()},
            timestamp_ms=int(s.get("timestamp-ms", 0)),
            sequence_number=int(s.get("sequence-number", 0)),
        )
        for s in metadata.get("snapshots") or []
    }
    current = metadata.get("current-snapshot-id")
    schemas = {s.get("schema-id"): s for s in metadata.get("schemas") or []}
    schema = schemas.get(metadata.get("current-schema-id"))
    partitioning, partition_fields = _partitioning(metadata, schema)
    return TableState(
        table_uuid=str(metadata["table-uuid"]),
        location=str(metadata["location"]),
        metadata_location=metadata_location,
        current_snapshot_id=None if current in (None, -1) else int(current),
        snapshots=snapshots,
        properties={str(k): str(v) for k, v in (metadata.get("properties") or {}).items()},
        refs={str(k): int(v["snapshot-id"]) for k, v in (metadata.get("refs") or {}).items()},
        schema=schema,
        partitioning=partitioning,
        partition_fields=partition_fields,
        format_version=int(metadata.get("format-version", 1)),
        main_history=tuple(int(e["snapshot-id"]) for e in metadata.get("snapshot-log") or []),
    )


def _partitioning(
    metadata: Mapping[str, Any], schema: Mapping[str, Any] | None
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The default partition spec's fields as Spark SQL transforms (`truncate(1000, `id`)`),
    and every spec's fields as (name, transform), the default spec's first, then the newest."""
    specs = {s.get("spec-id"): s for s in metadata.get("partition-specs") or []}
    default = specs.pop(metadata.get("default-spec-id"), {})
    names = {f["id"]: f["name"] for f in (schema or {}).get("fields", [])}
    current = _fields(default, names)
    older = [f for spec in reversed(list(specs.values())) for f in _fields(spec, names)]
    return tuple(t for _, t in current), tuple(dict.fromkeys([*current, *older]))


def _fields(spec: Mapping[str, Any], names: Mapping[int, str]) -> list[tuple[str, str]]:
    found = []
    for part in spec.get("fields", []):
        column = SPARK_SQL.quote(names.get(part["source-id"], part["name"]))
        transform = str(part["transform"])
        if transform == "identity":
            found.append((str(part["name"]), column))
        elif "[" in transform:  # bucket[16], truncate[1000]
            kind, width = transform.rstrip("]").split("[")
            found.append((str(part["name"]), f"{kind}({width}, {column})"))
        elif transform != "void":  # year, month, day, hour
            found.append((str(part["name"]), f"{transform}s({column})"))
    return found


def head_snapshot(state: TableState) -> SnapshotInfo | None:
    """The snapshot that says what the table holds: main's newest of ours, past maintenance."""
    for snapshot in state.ancestry():
        if snapshot.txn is not None or snapshot.operation != DATA_PRESERVING:
            return snapshot
    current = state.current
    return current  # only maintenance since the table began (or no snapshot): as it is


def head_of(state: TableState) -> LakeHead | None:
    snapshot = head_snapshot(state)
    return None if snapshot is None else _head(state, snapshot)


def made_by(state: TableState, txn: str) -> LakeHead | None:
    """The head a commit of `txn` made, if main holds it."""
    snapshot = next((s for s in state.ancestry() if s.txn == txn), None)
    return None if snapshot is None else _head(state, snapshot)


def _head(state: TableState, snapshot: SnapshotInfo) -> LakeHead:
    return head_at(state.table_uuid, snapshot, state.metadata_location)


def head_at(table_id: str, snapshot: SnapshotInfo, metadata_location: str | None) -> LakeHead:
    """The head `snapshot` makes of the table `table_id`."""
    batch = snapshot.summary.get(BATCH)
    return LakeHead(
        table_id=table_id,
        # A snapshot another writer made carries no commit of ours: no run recorded it.
        txn=snapshot.txn or f"snapshot {snapshot.snapshot_id}",
        batch=int(batch) if batch is not None else -1,
        cursor=snapshot.summary.get(CURSOR),
        snapshot_id=snapshot.snapshot_id,
        metadata_location=metadata_location,
    )


def record(state: TableState, name: str) -> dict[str, Any] | None:
    """A writers' record (`KEY`, `COLUMNS`, `SNAPSHOT`) as the head's commit left it."""
    snapshot = head_snapshot(state)
    key = RECORDS[name]
    text = snapshot.summary.get(key) if snapshot is not None and snapshot.txn else None
    if text is None:
        text = state.properties.get(key)  # committed before summaries carried the records
    return None if not text else dict(json.loads(text))


def layout_of(state: TableState) -> Layout | None:
    snapshot = head_snapshot(state)
    found = snapshot.summary.get(LAYOUT) if snapshot is not None else None
    if found in ("merge", "batches"):
        return found  # type: ignore[return-value]
    if record(state, KEY) is not None:
        return "merge"  # committed before summaries said: only merges kept a key record
    return "batches" if snapshot is not None and snapshot.txn else None


def facts_of(state: TableState, uri: str, misplaced: str | None = None) -> LakeFacts:
    """What a run reads about the table (its schema is added by the caller, when it reads it)."""
    replaced = record(state, SNAPSHOT)
    current = state.current
    return LakeFacts(
        uri=uri,
        head=head_of(state),
        replaced_batch=None if replaced is None else int(replaced["batch"]),
        key=record(state, KEY),
        columns=record(state, COLUMNS),
        layout=layout_of(state),
        holds_rows=current is not None and live_rows(current) > 0,
        misplaced=misplaced,
        current_snapshot=state.current_snapshot_id,
        format_version=state.format_version,
    )


@dataclass(frozen=True)
class Deletes:
    """A snapshot's delete files, and the share of the rows its data files hold that they remove
    (the rows a reader reads and drops)."""

    files: int
    fraction: float


def deletes_of(snapshot: SnapshotInfo) -> Deletes:
    summary = snapshot.summary
    records = int(summary.get("total-records", 0))
    deleted = int(summary.get("total-position-deletes", 0))
    return Deletes(
        files=int(summary.get("total-delete-files", 0)),
        fraction=deleted / records if records else 0.0,
    )


def live_rows(snapshot: SnapshotInfo) -> int:
    """The rows a snapshot reads as: its data files' rows less the positions its deletes remove.

    Spark merges a data file's earlier position deletes into the new delete file (and a v3
    table keeps one deletion vector per file), maintenance drops deletes whose data file is
    gone, and a table whose merges copy on write has its deletes applied before its first such
    merge (`commit_plan.plan_commit`: `apply_deletes`), so no position is counted twice or left
    counted.
    """
    summary = snapshot.summary
    return int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))


def landed(state: TableState, txn: str) -> bool:
    """Whether a commit of `txn` is on main: a kept snapshot of main's made it."""
    return made_by(state, txn) is not None


def branch_name(txn: str) -> str:
    return f"{BRANCH_PREFIX}{txn}"


def our_branches(state: TableState) -> dict[str, str]:
    """The branches our runs made and left (a run that died or failed), by their commit id:
    `ia-` and exactly a commit id, so another tool's `ia-<anything>` is never taken for one."""
    return {
        name: name.removeprefix(BRANCH_PREFIX)
        for name in state.refs
        if name.startswith(BRANCH_PREFIX) and is_txn(name.removeprefix(BRANCH_PREFIX))
    }


def summary_of(
    *,
    txn: str,
    batch: int,
    cursor: str | None,
    layout: Layout,
    records: Mapping[str, Any],
    run_id: str | None,
) -> dict[str, str]:
    """The summary properties a commit of ours writes."""
    summary = {TXN: txn, BATCH: str(batch), LAYOUT: layout}
    if cursor is not None:
        summary[CURSOR] = cursor
    if run_id:
        summary[RUN_ID] = run_id
    for name, value in records.items():
        if name in RECORDS and value is not None:
            summary[RECORDS[name]] = json.dumps(value, sort_keys=True)
        elif name == CONVERTED:
            summary[CONVERTED] = json.dumps(value, sort_keys=True)
    return summary
