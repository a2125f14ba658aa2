"""A LoadResult as a real merge run of `orders` would return it, with any field changed."""

from __future__ import annotations

from datetime import UTC, datetime

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType
from incremental_assets.results import LoadResult, MergeCounts


def load_result(**changes: object) -> LoadResult:
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
