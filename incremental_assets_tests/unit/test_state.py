from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import dagster as dg

from incremental_assets.cursor import CursorType
from incremental_assets.results import LoadResult, MergeCounts
from incremental_assets.spec import Mode
from incremental_assets.state import metadata_for, state_from_metadata


def _result(**changes: object) -> LoadResult:
    values: dict[str, object] = {
        "mode": Mode.MERGE,
        "cursor_column": "updated_at",
        "cursor_type": CursorType.TIMESTAMPTZ,
        "previous_cursor": None,
        "cursor": datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        "full_refresh": True,
        "batch": 3,
        "extract_filter": "TRUE",
        "rows_extracted": 10,
        "rows_written": 9,
        "files_written": 2,
        "merge": MergeCounts(5, 4, 1),
        "row_count": 100,
        "columns": (("id", "bigint"), ("_batch", "bigint")),
        "uri": "/lake/orders",
        "extract_seconds": 1.23456,
        "write_seconds": 0.5,
    }
    values.update(changes)
    return LoadResult(**values)  # type: ignore[arg-type]


def test_metadata_holds_the_cursor_as_exact_text_and_the_counts_as_numbers() -> None:
    metadata = metadata_for(_result())
    assert metadata["cursor"] == dg.MetadataValue.text("2025-01-01T00:00:00.000001+00:00")
    assert metadata["previous_cursor"] == dg.MetadataValue.null()
    assert metadata["rows_inserted"] == dg.MetadataValue.int(5)
    assert metadata["rows_deleted"] == dg.MetadataValue.int(1)
    assert metadata["dagster/row_count"] == dg.MetadataValue.int(100)
    assert metadata["extract_seconds"] == dg.MetadataValue.float(1.235)
    assert [c.name for c in metadata["dagster/column_schema"].value.columns] == ["id", "_batch"]


def test_merge_counts_appear_only_for_merge() -> None:
    metadata = metadata_for(_result(mode=Mode.APPEND, merge=None))
    assert not {"rows_inserted", "rows_updated", "rows_deleted"} & set(metadata)


def test_decimals_are_digits_never_floats() -> None:
    metadata = metadata_for(
        _result(cursor_type=CursorType.DECIMAL, cursor=Decimal("0.10000000000000000001"))
    )
    assert metadata["cursor"].value == "0.10000000000000000001"


def test_the_stored_state_reads_back_what_was_written() -> None:
    state = state_from_metadata(metadata_for(_result()), "run-1")
    assert state.cursor == "2025-01-01T00:00:00.000001+00:00"
    assert state.cursor_type is CursorType.TIMESTAMPTZ
    assert (state.cursor_column, state.batch, state.row_count, state.run_id) == (
        "updated_at",
        3,
        100,
        "run-1",
    )
