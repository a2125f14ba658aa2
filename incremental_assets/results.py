"""Values passed between the load, the writers and the metadata: no logic here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType, CursorValue


@dataclass(frozen=True)
class MergeCounts:
    inserted: int
    updated: int
    deleted: int


@dataclass(frozen=True)
class WriteOutcome:
    rows_extracted: int
    rows_written: int
    files_written: int
    rows_rewritten: int
    merge: MergeCounts | None
    columns: tuple[tuple[str, str], ...]
    files: tuple[str, ...] = ()  # the data files the commit added


@dataclass(frozen=True)
class LoadResult:
    mode: Mode
    cursor_column: str | None
    cursor_type: CursorType | None
    previous_cursor: CursorValue | None
    cursor: CursorValue | None
    full_refresh: bool
    batch: int
    extract_filter: str
    rows_extracted: int
    rows_written: int
    files_written: int
    merge: MergeCounts | None
    row_count: int
    columns: tuple[tuple[str, str], ...]
    uri: str
    extract_seconds: float
    write_seconds: float
    warnings: tuple[str, ...] = ()
    # Further facts about the window and the write, recorded as metadata under these keys.
    report: Mapping[str, str | int | bool] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the data files this run added to the lake
    primary_key: tuple[str, ...] = ()  # as configured, or as read from the database


@dataclass(frozen=True)
class StoredState:
    """What the last successful materialization recorded, as text straight from metadata."""

    cursor: str | None
    cursor_column: str | None
    cursor_type: CursorType | None
    batch: int
    run_id: str | None
    row_count: int | None = None

    @staticmethod
    def initial() -> StoredState:
        return StoredState(None, None, None, 0, None)
