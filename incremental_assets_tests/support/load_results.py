"""A LoadResult as a real merge run of `orders` would return it, with any field changed."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType
from incremental_assets.results import LoadResult, MergeCounts, WriteOutcome


def load_result(**changes: object) -> LoadResult:
    """Changes to the write's own fields (`files`, `merge`, ...) go to its `WriteOutcome`."""
    write: dict[str, object] = {
        "rows_extracted": 10,
        "rows_written": 9,
        "files_written": 2,
        "rows_rewritten": 9,
        "merge": MergeCounts(5, 4, 1),
        "columns": (("id", "bigint"), ("_batch", "bigint")),
    }
    outcome = {f.name for f in fields(WriteOutcome)}
    write.update({k: v for k, v in changes.items() if k in outcome})
    values: dict[str, object] = {
        "mode": Mode.MERGE,
        "cursor_column": "updated_at",
        "cursor_type": CursorType.TIMESTAMPTZ,
        "previous_cursor": None,
        "cursor": datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        "full_refresh": True,
        "batch": 3,
        "extract_filter": "TRUE",
        "written": WriteOutcome(**write),  # type: ignore[arg-type]
        "row_count": 100,
        "uri": "/lake/orders",
        "extract_seconds": 1.23456,
        "write_seconds": 0.5,
    }
    values.update({k: v for k, v in changes.items() if k not in outcome})
    return LoadResult(**values)  # type: ignore[arg-type]
