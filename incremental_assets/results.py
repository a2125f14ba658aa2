"""Values passed between the load, the writers and the metadata: no logic here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType, CursorValue
from incremental_assets.lake import LakeHead


@dataclass(frozen=True)
class MergeCounts:
    inserted: int
    updated: int
    deleted: int


# How a merge applied its delta. Plain Parquet: each touched bucket patched in a job of its own,
# every version in the touched buckets ranked in one shuffle, the whole table ranked and
# rewritten, or no bucket touched and only the schema changed. Iceberg: row by row, its changes
# written as delete files and new rows (merge on read) or as the files they touch rewritten
# (copy on write), or the whole table rewritten.
MergeStrategy = Literal[
    "patch buckets",
    "rank buckets",
    "rewrite table",
    "schema only",
    "merge on read",
    "copy on write",
]


@dataclass(frozen=True, kw_only=True)
class MergePath:
    strategy: MergeStrategy
    # The buckets (Iceberg: partitions) the merge changed; None: rewritten whole whatever the
    # delta (a refresh, a new key).
    buckets_touched: int | None
    buckets_held: int | None  # the buckets the lake held before the merge (plain Parquet)


@dataclass(frozen=True, kw_only=True)
class WriteOutcome:
    """What a run's write did, recorded whole: a field named as a `TableMetadata` key is recorded
    under it (the others: `metadata.RECORDED_AS`, `NOT_RECORDED`)."""

    rows_extracted: int
    rows_written: int
    files_written: int
    merge: MergeCounts | None  # merge tables: what changed (zeros when nothing did)
    columns: tuple[tuple[str, str], ...]
    rows_rewritten: int | None = None  # merge: rows written again in what it touched
    files: tuple[str, ...] = ()  # the data files the commit added
    merge_path: MergePath | None = None  # merge: how the delta was applied
    head: LakeHead | None = None  # the lake's head after the commit; None: nothing committed
    duplicate_keys: int | None = None  # merge: counted as the rows were written (None: not)
    rows_held: int | None = None  # the table's rows after the commit, where the commit tells
    # Iceberg merges: the table's delete files after the commit, and the share of its data files'
    # rows they remove (maintenance compacts past `deleted_fraction`)
    delete_files: int | None = None
    deleted_fraction: float | None = None

    @staticmethod
    def nothing(
        columns: tuple[tuple[str, str], ...], extracted: int = 0, merge: bool = False
    ) -> WriteOutcome:
        """What a run that commits nothing did: `extracted` rows read, none of them written."""
        return WriteOutcome(
            rows_extracted=extracted,
            rows_written=0,
            files_written=0,
            rows_rewritten=0 if merge else None,
            merge=MergeCounts(0, 0, 0) if merge else None,
            columns=columns,
        )


@dataclass(frozen=True)
class Report:
    """Further facts about a run's window and write; the ones it knows are recorded as metadata."""

    null_cursor_rows: int | None = None
    boundary_rows: int | None = None  # rows sharing the frozen bound's value
    cursor_capped_at: str | None = None  # the future cap, when rows were dated past it
    transaction_cap: str | None = None  # what the cap saw, and what it could not
    transaction_cap_applied: bool | None = None  # whether it held rows back
    backfill: str | None = None  # `[from, to)` of a bounded backfill
    schema_change: str | None = None
    deletes_reconciled: bool | None = None
    # What the next run would read again (ties at the cursor, the lookback below it), so that it
    # can tell without Spark whether anything changed: `<rows>:<md5>`, or the files' listing.
    window_fingerprint: str | None = None
    spark: str | None = None  # how the run used Spark: `not started (nothing new)`, or the engine
    settings_changed: str | None = None  # the lake-shaping settings changed since the last run
    spark_jobs: int | None = None  # Spark jobs the run and its checks took (None: not counted)
    spark_stages: int | None = None
    maintenance: str | None = None  # what the lake's maintenance did after the commit, if due
    log_changes: int | None = None  # `capture: log`: what the run read of the log (metadata.py)
    log_transactions: int | None = None
    log_retained_bytes: int | None = None
    log_more_waiting: bool | None = None


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    mode: Mode
    cursor_column: str | None
    cursor_type: CursorType | None
    previous_cursor: CursorValue | None
    cursor: CursorValue | None
    full_refresh: bool
    batch: int
    extract_filter: str
    written: WriteOutcome  # what the run's write did
    row_count: int
    uri: str
    extract_seconds: float
    write_seconds: float
    warnings: tuple[str, ...] = ()
    report: Report = field(default_factory=Report)
    primary_key: tuple[str, ...] = ()  # as configured, or as read from the database
    head: LakeHead | None = None  # the lake's head after the run, whether or not it committed
    settings: str | None = None  # the lake-shaping settings the run ran under (`settings.py`)
    table_name: str | None = None  # the lake table's name in its catalog (Iceberg)


@dataclass(frozen=True, kw_only=True)
class StoredState:
    """What the last successful materialization recorded, as text straight from metadata."""

    cursor: str | None
    cursor_column: str | None
    cursor_type: CursorType | None
    batch: int
    run_id: str | None
    row_count: int | None = None
    window_fingerprint: str | None = None
    lake_table_id: str | None = None  # the identity of the lake table the run committed to
    lake_commit: str | None = None  # the lake's last commit when the run ended
    settings: str | None = None  # the lake-shaping settings the run ran under, as JSON
    columns: tuple[tuple[str, str], ...] | None = None  # the lake's columns after the run

    @staticmethod
    def initial() -> StoredState:
        return StoredState(cursor=None, cursor_column=None, cursor_type=None, batch=0, run_id=None)
