"""Where the cursor lives: the metadata of the asset's last successful materialization.

This module reads the stored state back from the instance (the keys are `metadata.py`'s). A
failed run records no materialization, so the stored cursor only ever describes data that was
durably written to the lake.

An operator can move the cursor by hand (`incremental-assets cursor set|reset`): that records a
runless *observation* carrying the same keys plus `cursor_action`. Observations don't mark the
asset as updated (nothing downstream runs because of them). The reader honours the latest such
observation if it came after the latest materialization, and the materialization otherwise.

What the reader settles on is what the asset's page shows as the check `next_run_reads_from`
(`CursorInForce`): every run evaluates it with the cursor it recorded, and a `cursor set|reset`
records it beside its observation, so the page shows the cursor a run would read before any run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from incremental_assets.cursor import CursorType
from incremental_assets.lake import LakeHead
from incremental_assets.metadata import TableMetadata, override_metadata
from incremental_assets.results import StoredState
from incremental_assets.translator import NEXT_RUN_CHECK


@dataclass(frozen=True)
class StateRecords:
    """The latest materialization, and a `cursor set|reset` recorded after it, if any."""

    materialization: dg.EventLogRecord | None
    override: dg.EventLogRecord | None

    @property
    def latest(self) -> dg.EventLogRecord | None:
        """The record the cursor comes from: an override supersedes the materialization before
        it."""
        return self.override or self.materialization

    def stored_state(self) -> StoredState:
        record = self.latest
        if record is None:
            return StoredState.initial()
        return record_of(record).stored_state(record.event_log_entry.run_id or None)


def read_stored_state(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> StoredState:
    """The state of the latest materialization or cursor observation, or the initial state."""
    return read_state_records(instance, asset_key).stored_state()


def read_state_records(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> StateRecords:
    latest = instance.fetch_materializations(asset_key, limit=1).records
    materialization = latest[0] if latest else None
    # Only an override newer than the last materialization counts; other observations (from any
    # other tool) may come in any number, so page through them instead of looking at a few.
    after = materialization.storage_id if materialization is not None else None
    override = newest_record(
        instance.fetch_observations,
        dg.AssetRecordsFilter(asset_key=asset_key, after_storage_id=after),
        lambda record: record_of(record).cursor_action is not None,
    )
    return StateRecords(materialization, override)


def last_incremental_materialization(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey
) -> dg.EventLogRecord | None:
    """The latest materialization that was not a bounded backfill (which leaves the cursor)."""
    return newest_record(
        instance.fetch_materializations,
        dg.AssetRecordsFilter(asset_key=asset_key),
        lambda record: record_of(record).backfill is None,
    )


_PAGE = 100


def newest_record(
    fetch: Callable[..., dg.EventRecordsResult],
    records_filter: dg.AssetRecordsFilter,
    wanted: Callable[[dg.EventLogRecord], bool],
) -> dg.EventLogRecord | None:
    """The newest record `fetch` finds that is `wanted`, paging back as far as it takes."""
    cursor = None
    while True:
        page = fetch(records_filter, limit=_PAGE, cursor=cursor)
        found = next((r for r in page.records if wanted(r)), None)
        if found is not None or not page.has_more:
            return found
        cursor = page.cursor


def record_of(record: dg.EventLogRecord | None) -> TableMetadata:
    """The metadata record of a materialization or observation (empty for None)."""
    if record is None:
        return TableMetadata()
    event = record.event_log_entry.asset_materialization or record.event_log_entry.asset_observation
    return TableMetadata.extract(event.metadata if event is not None else {})


def record_cursor_override(
    instance: dg.DagsterInstance,
    asset_key: dg.AssetKey,
    previous: StoredState,
    cursor: str | None,
    cursor_column: str | None,
    cursor_type: CursorType | None,
    note: str,
    converted: LakeHead | None = None,
) -> None:
    """Record a hand-set cursor (None: the next run extracts everything), or the lake table a
    conversion made (`converted`), as a runless observation."""
    metadata = override_metadata(previous, cursor, cursor_column, cursor_type, note, converted)
    instance.report_runless_asset_event(dg.AssetObservation(asset_key=asset_key, metadata=metadata))
    if cursor_column:  # a table with a cursor: its page shows the one the next run reads from
        in_force = CursorInForce.of(read_state_records(instance, asset_key))
        instance.report_runless_asset_event(in_force.evaluation(asset_key))


@dataclass(frozen=True)
class CursorInForce:
    """The cursor the next run reads from, as the check `next_run_reads_from` shows it: the
    cursor of the state the reader settles on, and where that state came from."""

    cursor: str | None
    column: str | None
    # `set` or `reset` by hand (`convert` keeps the cursor), or None: recorded by a run, or none.
    action: str | None
    origin: str

    @classmethod
    def of(cls, records: StateRecords) -> CursorInForce:
        """What the reader settles on: a hand-set cursor after the last run, or that run's."""
        record = records.latest
        if record is None:
            return cls(None, None, None, "no run has recorded a cursor yet")
        data = record_of(record)
        at = datetime.fromtimestamp(record.timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if record is records.override:
            origin = f"cursor {data.cursor_action} at {at}: {data.note}"
        else:
            origin = f"recorded by run {record.event_log_entry.run_id} at {at}"
        return cls(data.cursor, data.cursor_column, data.cursor_action, origin)

    @classmethod
    def after_run(cls, recorded: TableMetadata, run_id: str) -> CursorInForce:
        """What a run that records `recorded` leaves for the next one."""
        return cls(recorded.cursor, recorded.cursor_column, None, f"recorded by run {run_id}")

    @property
    def description(self) -> str:
        if self.cursor is not None:
            return f"The next run reads from {self.cursor} ({self.origin})."
        if self.action == "reset":
            return f"The next run reads everything and replaces the table ({self.origin})."
        return f"The next run reads everything ({self.origin})."

    @property
    def metadata(self) -> dict[str, dg.MetadataValue]:
        return {
            "cursor": dg.MetadataValue.text(self.cursor or ""),
            "cursor_column": dg.MetadataValue.text(self.column or ""),
            "recorded_by": dg.MetadataValue.text(self.origin),
        }

    def result(self) -> dg.AssetCheckResult:
        """The check's result, for a step of the table's asset."""
        return dg.AssetCheckResult(
            check_name=NEXT_RUN_CHECK,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=self.metadata,
            description=self.description,
        )

    def evaluation(self, asset_key: dg.AssetKey) -> dg.AssetCheckEvaluation:
        """The check's evaluation, recorded without a run (beside a hand-set cursor)."""
        return dg.AssetCheckEvaluation(
            asset_key=asset_key,
            check_name=NEXT_RUN_CHECK,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=self.metadata,
            description=self.description,
        )
