"""Keeping an Iceberg table small to read and to commit as it ages: Iceberg's Spark procedures,
run after a run's commit when they are due.

* Snapshots expire only past both a count and an age (`lake.keep_snapshots`,
  `lake.keep_snapshots_for`): a reader's snapshot, or the `iceberg_snapshot_id` a
  materialization recorded, stays readable for at least that long whatever the rate of runs.
  `expire_snapshots` deletes the files only expired snapshots held. Metadata files are deleted
  as commits replace them, past the newest 100 (`write.metadata.previous-versions-max`).

`due` is a pure function of the table's metadata and the clock, so a run that has nothing to do
pays for one metadata read it makes anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from incremental_assets.lake.iceberg.records import TableState


@dataclass(frozen=True)
class Maintenance:
    """What a run's maintenance did, for its metadata."""

    expired_snapshots: int
    deleted_files: int
    seconds: float

    def describe(self) -> str:
        return (
            f"expired {self.expired_snapshots} snapshots, deleted {self.deleted_files} files "
            f"({self.seconds:.1f}s)"
        )


def expiry_due(state: TableState, keep: int, keep_for: timedelta, now: datetime) -> datetime | None:
    """The age before which snapshots may expire, when some are past both limits (else None)."""
    if len(state.snapshots) <= keep:
        return None
    older_than = now - keep_for
    oldest = min(s.timestamp_ms for s in state.snapshots.values())
    if datetime.fromtimestamp(oldest / 1000, UTC) >= older_than:
        return None
    return older_than


def expire(
    spark: SparkSession, table: str, catalog: str, older_than: datetime, keep: int
) -> Maintenance:
    """Expire the snapshots older than `older_than` beyond the newest `keep` of main."""
    started = time.monotonic()
    stamp = older_than.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    row = spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
        f"older_than => TIMESTAMP '{stamp} UTC', retain_last => {keep})"
    ).first()
    counts = row.asDict() if row is not None else {}
    deleted = sum(int(v or 0) for k, v in counts.items() if k.startswith("deleted_"))
    return Maintenance(
        expired_snapshots=int(counts.get("deleted_manifest_lists_count") or 0),
        deleted_files=deleted,
        seconds=time.monotonic() - started,
    )
