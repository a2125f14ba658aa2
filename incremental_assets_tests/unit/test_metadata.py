"""The metadata record: every field of a load's result is a key (or said why not), keys are
shown in reading order with the internals in one entry, identifiers are text, and what a run
records reads back as the state the next run starts from."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import dagster as dg

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType
from incremental_assets.lake.facts import LakeHead
from incremental_assets.metadata import (
    INTERNALS,
    NOT_RECORDED,
    RECORDED_AS,
    TableMetadata,
    metadata_for,
    state_after,
)
from incremental_assets.results import LoadResult, MergeCounts, Report, WriteOutcome

AT = datetime(2025, 6, 1, 12, tzinfo=UTC)


def _result() -> LoadResult:
    return LoadResult(
        mode=Mode.MERGE,
        cursor_column="updated_at",
        cursor_type=CursorType.TIMESTAMPTZ,
        previous_cursor=None,
        cursor=AT,
        full_refresh=False,
        batch=7,
        extract_filter='"updated_at" <= 1',
        written=WriteOutcome(
            rows_extracted=10,
            rows_written=9,
            files_written=2,
            rows_rewritten=9,
            merge=MergeCounts(3, 6, 1),
            columns=(("id", "bigint"),),
        ),
        row_count=100,
        uri="/lake/orders",
        extract_seconds=1.5,
        write_seconds=0.5,
        report=Report(window_fingerprint="10:abc", spark_jobs=3, boundary_rows=2),
        head=LakeHead(table_id="t1", txn="x1", batch=7, snapshot_id=8_000_000_000_000_000_000),
        settings='{"mode":"merge"}',
        table_name="incremental_assets.orders",
    )


def test_every_field_of_a_result_is_recorded_or_said_why_not() -> None:
    """A field added to `LoadResult`, `Report` or `WriteOutcome` fails here until metadata.py
    records it (or says why not): `extra="ignore"` would otherwise drop it without a word."""
    keys = set(TableMetadata.model_fields)
    for record in (LoadResult, Report, WriteOutcome):
        for field in fields(record):
            assert field.name in keys | set(RECORDED_AS) | set(NOT_RECORDED), field.name


def test_the_ui_shows_the_cursor_and_counts_first_and_the_internals_in_one_entry() -> None:
    metadata = metadata_for(_result())

    keys = list(metadata)
    assert keys[:5] == [
        "cursor",
        "previous_cursor",
        "cursor_column",
        "cursor_type",
        "rows_extracted",
    ]
    assert keys[-1] == INTERNALS
    internals = metadata[INTERNALS].value
    assert isinstance(internals, dict)
    assert internals["window_fingerprint"] == "10:abc" and internals["lake_commit"] == "x1"
    assert {"settings", "spark_jobs", "boundary_rows", "lake_table_id"} <= set(internals)
    assert internals["settings"] == {"mode": "merge"}  # an object, not JSON in a string
    assert not {"window_fingerprint", "settings", "lake_commit", "spark_jobs"} & set(keys)


def test_identifiers_are_text_so_only_quantities_are_plotted() -> None:
    metadata = metadata_for(_result())

    numbers = {
        k for k, v in metadata.items() if isinstance(v, dg.IntMetadataValue | dg.FloatMetadataValue)
    }
    assert isinstance(metadata["iceberg_snapshot_id"], dg.TextMetadataValue)
    assert isinstance(metadata["batch"], dg.TextMetadataValue)
    assert numbers == {
        "rows_extracted",
        "rows_written",
        "rows_inserted",
        "rows_updated",
        "rows_deleted",
        "dagster/row_count",
        "extract_seconds",
        "write_seconds",
        "files_written",
        "rows_rewritten",
    }


def test_what_a_run_records_reads_back_as_the_next_runs_state() -> None:
    state = state_after(_result(), run_id="run-1")

    assert (state.cursor, state.batch, state.row_count) == (
        "2025-06-01T12:00:00.000000+00:00",
        7,
        100,
    )
    assert (state.lake_table_id, state.lake_commit) == ("t1", "x1")
    assert state.window_fingerprint == "10:abc" and state.settings == '{"mode":"merge"}'
    assert state.columns == (("id", "bigint"),)


def test_records_written_before_the_internals_entry_read_the_same() -> None:
    """Earlier versions wrote every key at the top: those materializations still read back."""
    flat = {
        "cursor": "5",
        "cursor_type": "integer",
        "batch": 3,
        "lake_commit": "x0",
        "window_fingerprint": "1:a",
        "iceberg_snapshot_id": 42,
    }

    record = TableMetadata.extract(flat)

    assert (record.batch, record.lake_commit, record.window_fingerprint) == (3, "x0", "1:a")
    assert record.iceberg_snapshot_id == 42
