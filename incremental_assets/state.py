"""Where the cursor lives: the metadata of the asset's last successful materialization.

This module reads the stored state back from the instance (the keys are `metadata.py`'s). A
failed run records no materialization, so the stored cursor only ever describes data that was
durably written to the lake.

An operator can move the cursor by hand (`incremental-assets cursor set|reset`): that records a
runless *observation* carrying the same keys plus `cursor_action`. Observations don't mark the
asset as updated (nothing downstream runs because of them). The reader honours the latest such
observation if it came after the latest materialization, and the materialization otherwise.

A `cursor set|reset` observation's description says what the next run reads (`next_run_reads`),
so the asset's Events tab shows it before any run; after a run, its materialization's `cursor`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from incremental_assets.cursor import CursorType
from incremental_assets.lake import LakeHead
from incremental_assets.metadata import TableMetadata, override_metadata
from incremental_assets.results import StoredState


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
    action = TableMetadata.extract(metadata).cursor_action or "set"
    observation = dg.AssetObservation(
        asset_key=asset_key, metadata=metadata, description=next_run_reads(cursor, action, note)
    )
    instance.report_runless_asset_event(observation)


def next_run_reads(cursor: str | None, action: str, note: str) -> str:
    """What the next run reads after a `cursor set|reset`, or a conversion (`convert`)."""
    what = f"from {cursor}" if cursor is not None else "everything"
    if action == "reset":
        what += " and replaces the table"
    how = "the lake table was converted" if action == "convert" else f"cursor {action} by hand"
    return f"The next run reads {what}: {how} ({note})."
