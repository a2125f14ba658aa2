"""Where the cursor lives: the metadata of the asset's last successful materialization.

This module is the only one that knows the metadata keys. It writes a load's result as
materialization metadata and reads the last one back. A failed run records no materialization,
so the stored cursor only ever describes data that was durably written to the lake.

An operator can move the cursor by hand (`incremental-assets cursor set|reset`): that records a
runless *observation* carrying the same keys plus `cursor_action`. Observations don't mark the
asset as updated (nothing downstream runs because of them). The reader honours the latest such
observation if it came after the latest materialization, and the materialization otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from incremental_assets.cursor import CursorType, format_cursor
from incremental_assets.results import LoadResult, StoredState

CURSOR = "cursor"
PREVIOUS_CURSOR = "previous_cursor"
CURSOR_COLUMN = "cursor_column"
CURSOR_TYPE = "cursor_type"
MODE = "mode"
FULL_REFRESH = "full_refresh"
BATCH = "batch"
ROWS_EXTRACTED = "rows_extracted"
ROWS_WRITTEN = "rows_written"
ROWS_INSERTED = "rows_inserted"
ROWS_UPDATED = "rows_updated"
ROWS_DELETED = "rows_deleted"
EXTRACT_FILTER = "extract_filter"
EXTRACT_SECONDS = "extract_seconds"
WRITE_SECONDS = "write_seconds"
FILES_WRITTEN = "files_written"
WARNINGS = "warnings"
BACKFILL = "backfill"
ROW_COUNT = "dagster/row_count"
CURSOR_ACTION = "cursor_action"
NOTE = "note"


@dataclass(frozen=True)
class StateRecords:
    """The latest materialization, and a `cursor set|reset` recorded after it, if any."""

    materialization: dg.EventLogRecord | None
    override: dg.EventLogRecord | None

    @property
    def latest(self) -> dg.EventLogRecord | None:
        """The record the cursor comes from: an override supersedes the materialization before it."""
        return self.override or self.materialization

    def stored_state(self) -> StoredState:
        record = self.latest
        if record is None:
            return StoredState.initial()
        return state_from_metadata(metadata_of(record), record.event_log_entry.run_id or None)


def read_stored_state(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> StoredState:
    """The state of the latest materialization or cursor observation, or the initial state."""
    return read_state_records(instance, asset_key).stored_state()


def read_state_records(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> StateRecords:
    latest = instance.fetch_materializations(asset_key, limit=1).records
    materialization = latest[0] if latest else None
    # Only an override newer than the last materialization counts; other observations (from any
    # other tool) may come in any number, so page through them instead of looking at a few.
    after = materialization.storage_id if materialization is not None else None
    override = _newest(
        instance.fetch_observations,
        dg.AssetRecordsFilter(asset_key=asset_key, after_storage_id=after),
        lambda record: CURSOR_ACTION in metadata_of(record),
    )
    return StateRecords(materialization, override)


def last_incremental_materialization(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey
) -> dg.EventLogRecord | None:
    """The latest materialization that was not a bounded backfill (which leaves the cursor)."""
    return _newest(
        instance.fetch_materializations,
        dg.AssetRecordsFilter(asset_key=asset_key),
        lambda record: BACKFILL not in metadata_of(record),
    )


_PAGE = 100


def _newest(
    fetch: Callable[..., dg.EventRecordsResult],
    records_filter: dg.AssetRecordsFilter,
    wanted: Callable[[dg.EventLogRecord], bool],
) -> dg.EventLogRecord | None:
    cursor = None
    while True:
        page = fetch(records_filter, limit=_PAGE, cursor=cursor)
        found = next((r for r in page.records if wanted(r)), None)
        if found is not None or not page.has_more:
            return found
        cursor = page.cursor


def metadata_of(record: dg.EventLogRecord) -> Mapping[str, Any]:
    event = record.event_log_entry.asset_materialization or record.event_log_entry.asset_observation
    return event.metadata if event is not None else {}


def record_cursor_override(
    instance: dg.DagsterInstance,
    asset_key: dg.AssetKey,
    previous: StoredState,
    cursor: str | None,
    cursor_column: str | None,
    cursor_type: CursorType | None,
    note: str,
) -> None:
    """Record a hand-set cursor (None: the next run extracts everything) as a runless observation."""
    metadata: dict[str, Any] = {
        CURSOR: dg.MetadataValue.text(cursor) if cursor is not None else dg.MetadataValue.null(),
        PREVIOUS_CURSOR: dg.MetadataValue.text(previous.cursor)
        if previous.cursor
        else dg.MetadataValue.null(),
        CURSOR_COLUMN: dg.MetadataValue.text(cursor_column or ""),
        CURSOR_TYPE: dg.MetadataValue.text(cursor_type.value if cursor_type else ""),
        BATCH: dg.MetadataValue.int(previous.batch),
        CURSOR_ACTION: dg.MetadataValue.text("set" if cursor is not None else "reset"),
        NOTE: dg.MetadataValue.text(note),
    }
    if previous.row_count is not None:
        metadata[ROW_COUNT] = dg.MetadataValue.int(previous.row_count)
    instance.report_runless_asset_event(dg.AssetObservation(asset_key=asset_key, metadata=metadata))


def state_from_metadata(metadata: Mapping[str, Any], run_id: str | None) -> StoredState:
    values = {key: getattr(value, "value", value) for key, value in metadata.items()}
    cursor_type = values.get(CURSOR_TYPE)
    return StoredState(
        cursor=values.get(CURSOR),
        cursor_column=values.get(CURSOR_COLUMN),
        cursor_type=CursorType(cursor_type) if cursor_type else None,
        batch=int(values.get(BATCH) or 0),
        run_id=run_id,
        row_count=values.get(ROW_COUNT),
    )


def _text(cursor_type: CursorType | None, value: Any) -> dg.MetadataValue:
    if value is None or cursor_type is None:
        return dg.MetadataValue.null()
    return dg.MetadataValue.text(format_cursor(cursor_type, value))


def _value(value: str | int | bool) -> dg.MetadataValue:
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    return dg.MetadataValue.text(value)


def metadata_for(result: LoadResult) -> dict[str, Any]:
    """The materialization metadata for one load. The key names are a public contract."""
    metadata: dict[str, Any] = {
        CURSOR: _text(result.cursor_type, result.cursor),
        PREVIOUS_CURSOR: _text(result.cursor_type, result.previous_cursor),
        CURSOR_COLUMN: dg.MetadataValue.text(result.cursor_column or ""),
        CURSOR_TYPE: dg.MetadataValue.text(result.cursor_type.value if result.cursor_type else ""),
        MODE: dg.MetadataValue.text(result.mode.value),
        FULL_REFRESH: dg.MetadataValue.bool(result.full_refresh),
        BATCH: dg.MetadataValue.int(result.batch),
        ROWS_EXTRACTED: dg.MetadataValue.int(result.rows_extracted),
        ROWS_WRITTEN: dg.MetadataValue.int(result.rows_written),
        EXTRACT_FILTER: dg.MetadataValue.text(result.extract_filter),
        EXTRACT_SECONDS: dg.MetadataValue.float(round(result.extract_seconds, 3)),
        WRITE_SECONDS: dg.MetadataValue.float(round(result.write_seconds, 3)),
        FILES_WRITTEN: dg.MetadataValue.int(result.files_written),
    }
    if result.merge is not None:
        metadata[ROWS_INSERTED] = dg.MetadataValue.int(result.merge.inserted)
        metadata[ROWS_UPDATED] = dg.MetadataValue.int(result.merge.updated)
        metadata[ROWS_DELETED] = dg.MetadataValue.int(result.merge.deleted)
    for key, value in result.report.items():
        metadata[key] = _value(value)
    if result.warnings:
        metadata[WARNINGS] = dg.MetadataValue.md("\n".join(f"- {w}" for w in result.warnings))
    schema = dg.TableSchema(
        columns=[dg.TableColumn(name=name, type=type_) for name, type_ in result.columns]
    )
    metadata["dagster/column_schema"] = dg.MetadataValue.table_schema(schema)
    metadata[ROW_COUNT] = dg.MetadataValue.int(result.row_count)
    metadata["dagster/uri"] = dg.MetadataValue.text(result.uri)
    return metadata
