"""Whether a run would find nothing new, proven without Spark.

A run starts by checking, over a plain connection or a file listing, that nothing lies past the
stored cursor that it would load (the same freeze statements as a run: transaction cap, safety
lag, future cap), and that the fingerprint the last run recorded (`fingerprint.py`) is unchanged.
It refuses a lake that doesn't fit as a run with Spark would (`decisions.kind_of_run`). Anything
it can't prove (a first run, a full refresh, a reconcile that is due, an unfinished commit, a
source it can't reach, rows held back that a later clock would release) falls through to a run
with Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.config.rules import check_cursor_rules
from incremental_assets.cursor import CursorValue, parse_cursor
from incremental_assets.decisions import Asked, at_recorded_commit, kind_of_run
from incremental_assets.errors import CursorError
from incremental_assets.fingerprint import fetch_fingerprint, files_listing, window_below
from incremental_assets.lake import LakeFacts
from incremental_assets.plan import WindowPlan, plan_from_bounds, start_of
from incremental_assets.results import StoredState
from incremental_assets.settings import changed_settings
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor
from incremental_assets.sources.database import fetch_row
from incremental_assets.sources.freeze_sql import freeze, relation_of
from incremental_assets.sources.jdbc import refuse_session_names


@dataclass(frozen=True)
class Unchanged:
    """What the check found: the window a run would have read, and its fingerprint."""

    plan: WindowPlan
    fingerprint: str


def prove_unchanged(
    table: TableSpec, stored: StoredState, lake: LakeFacts, asked: Asked
) -> Unchanged | None:
    """The proof that a run would find nothing new, or None when it can't be given."""
    cursor = checkable(table, stored, lake, asked)
    if cursor is None:
        return None
    try:
        previous = parse_cursor(cursor.type, str(stored.cursor))
    except CursorError:
        return None  # the run says why it can't read its cursor
    check_cursor_rules(table, cursor.type)
    if isinstance(table.source, FilesSourceSpec):
        if files_listing(table) != stored.window_fingerprint:
            return None
        return Unchanged(_files_plan(table, cursor, previous), str(stored.window_fingerprint))
    return _prove_rows(table, stored, cursor, previous)


def checkable(
    table: TableSpec, stored: StoredState, lake: LakeFacts, asked: Asked
) -> Cursor | None:
    """The cursor to check against, when nothing already says that Spark must run. A lake that
    doesn't fit is refused here as the run with Spark refuses it."""
    if (
        asked.backfill
        or table.cursor is None
        or table.reconcile_tolerance is not None  # the check counts the source with Spark
        or stored.cursor_type is None
        or stored.window_fingerprint is None
        or stored.cursor_column != table.cursor.column
        or stored.settings is None
        or changed_settings(stored.settings, asked.settings)  # a change: the run with Spark
        or lake.pending  # a commit to finish first
    ):
        return None
    if kind_of_run(table, asked, stored, lake, source=None).replace_all:
        return None
    if lake.head is not None and not at_recorded_commit(stored, lake):
        return None  # a commit the last run didn't record: the run with Spark repeats it
    return Cursor(table.cursor.column, stored.cursor_type)


def _prove_rows(
    table: TableSpec, stored: StoredState, cursor: Cursor, previous: CursorValue
) -> Unchanged | None:
    assert isinstance(table.source, JdbcSourceSpec)
    database = database_of(table.source)
    refuse_session_names(table, table.source, database)
    start = start_of(table, cursor, previous, replace_all=False)
    try:
        conn = database.connect(table.source)
        try:
            bounds = freeze(
                table, database, start.freeze_request(table), lambda sql: fetch_row(conn, sql)
            )
            window = window_below(table, cursor, previous)
            fingerprint = fetch_fingerprint(conn, database, relation_of(table), window)
        finally:
            conn.close()
    except database.driver_errors:
        return None  # a source Spark may reach but this process can't: let the run try
    plan = plan_from_bounds(table, stored, start, bounds)
    if bounds.null_rows and table.null_cursor == "include":
        return None  # those rows are read again by every run
    if plan.new_cursor != previous or fingerprint != stored.window_fingerprint or plan.reconcile:
        return None
    return Unchanged(plan, fingerprint)


def _files_plan(table: TableSpec, cursor: Cursor, previous: CursorValue) -> WindowPlan:
    """A files table's plan: its listing is unchanged, so the run would read the window up to
    the cursor again, and keep the cursor."""
    return WindowPlan(
        cursor=cursor,
        replace_all=False,
        previous=previous,
        window=window_below(table, cursor, previous),
        new_cursor=previous,
    )
