"""Where the cursor lives: the metadata of the asset's last successful materialization.

This module is the only one that knows the metadata keys. It writes a load's result as
materialization metadata and reads the last one back. A failed run records no materialization,
so the stored cursor only ever describes data that was durably written to the lake.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def read_stored_state(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> StoredState:
    """The state recorded by the asset's latest materialization, or the initial state."""
    event = instance.get_latest_materialization_event(asset_key)
    if event is None or event.asset_materialization is None:
        return StoredState.initial()
    return state_from_metadata(event.asset_materialization.metadata, event.run_id)


def state_from_metadata(metadata: Mapping[str, Any], run_id: str | None) -> StoredState:
    values = {key: getattr(value, "value", value) for key, value in metadata.items()}
    cursor_type = values.get(CURSOR_TYPE)
    return StoredState(
        cursor=values.get(CURSOR),
        cursor_column=values.get(CURSOR_COLUMN),
        cursor_type=CursorType(cursor_type) if cursor_type else None,
        batch=int(values.get(BATCH) or 0),
        run_id=run_id,
        row_count=values.get("dagster/row_count"),
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
    metadata["dagster/row_count"] = dg.MetadataValue.int(result.row_count)
    metadata["dagster/uri"] = dg.MetadataValue.text(result.uri)
    return metadata
