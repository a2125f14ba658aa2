"""`cursor set` and `cursor reset`: move a table's cursor by hand, under the table's lock."""

from __future__ import annotations

import argparse

from incremental_assets.cli.context import (
    actor,
    asset_key,
    open_instance,
    project_and_tables,
    table_lock,
)
from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType, format_cursor, parse_cursor
from incremental_assets.errors import CursorError, TableProblem
from incremental_assets.results import StoredState
from incremental_assets.sources.log_changes import position_type
from incremental_assets.state import read_stored_state, record_cursor_override


def set_cursor(args: argparse.Namespace) -> int:
    project, (table,) = project_and_tables(args, [args.table])
    if table.cursor is None and table.capture != "log":
        raise CursorError(
            TableProblem(
                table.name, "it has no cursor to set: it is fully refreshed on every run.", "cursor"
            )
        )
    with open_instance() as instance:
        # Checked before waiting for the lock, so a bad value fails at once ...
        _cursor_text(table, read_stored_state(instance, asset_key(project, table)), args.value)
        with table_lock(project, table, "cursor set"):
            # ... and read again under it: a run that just finished may have moved the batch.
            stored = read_stored_state(instance, asset_key(project, table))
            kind, value = _cursor_text(table, stored, args.value)
            note = f"{args.reason} (set by {actor()} with incremental-assets cursor set)"
            column = table.cursor.column if table.cursor else None
            record_cursor_override(
                instance, asset_key(project, table), stored, value, column, kind, note
            )
    print(f"{table.name}: cursor {stored.cursor} -> {value}; the next run reads from there")
    return 0


def _cursor_text(table: TableSpec, stored: StoredState, text: str) -> tuple[CursorType, str]:
    """The cursor's type and `text` as its exact form; CursorError if either can't be had. A
    table captured from the log has a position in the log (an LSN, a binary log's) for its
    cursor."""
    if table.capture == "log":
        assert isinstance(table.source, JdbcSourceSpec)
        position = position_type(table.source.url)
        return position, _parse_value(table, position, text)
    assert table.cursor is not None
    kind = stored.cursor_type or table.cursor.declared_type
    if kind is None:
        raise CursorError(
            TableProblem(
                table.name,
                "the cursor's type isn't known yet (no run has recorded it and the config doesn't "
                "declare it).",
                "cursor.type",
                "declare it, e.g. cursor: {column: updated_at, type: timestamptz}, or run the "
                "table once.",
            )
        )
    return kind, _parse_value(table, kind, text)


def reset_cursor(args: argparse.Namespace) -> int:
    project, (table,) = project_and_tables(args, [args.table])
    with open_instance() as instance, table_lock(project, table, "cursor reset"):
        stored = read_stored_state(instance, asset_key(project, table))
        note = f"{args.reason} (reset by {actor()} with incremental-assets cursor reset)"
        column = table.cursor.column if table.cursor else None
        record_cursor_override(
            instance, asset_key(project, table), stored, None, column, stored.cursor_type, note
        )
    print(
        f"{table.name}: cursor {stored.cursor} reset; the next run extracts everything and "
        "replaces the table"
    )
    return 0


def _parse_value(table: TableSpec, kind: CursorType, text: str) -> str:
    try:
        return format_cursor(kind, parse_cursor(kind, text))
    except CursorError as exc:
        raise CursorError(
            TableProblem(table.name, f"{exc} Its cursor is of type {kind.value}.")
        ) from None
