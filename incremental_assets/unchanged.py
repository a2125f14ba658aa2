"""Whether a run would find nothing new, proven without Spark, and the fingerprint that proves it.

Every run records, beside its cursor, a fingerprint of what the next run would read again: the
rows from the next lower bound (the cursor minus the lookback, ties included) up to the cursor,
counted and digested by the source database; for files, the listing (paths, sizes, modification times) of
what the table reads. The database's fingerprint is taken after the bound is frozen and before
the rows are read, so a change made after it always shows; the listing, before anything is read.

A run then starts by checking, over a plain connection or a file listing, that nothing lies past
the stored cursor that it would load (the same freeze statements as a run: transaction cap,
safety lag, future cap), and that the fingerprint is unchanged. Anything it can't prove (a first
run, a full refresh, a reconcile that is due, an unfinished commit, a source it can't reach, rows
held back that a later clock would release) falls through to a run with Spark.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, Mode, TableSpec
from incremental_assets.config.rules import check_cursor_rules
from incremental_assets.cursor import CursorValue, parse_cursor
from incremental_assets.decisions import RunRequest, check_lake_fits, kind_of_run
from incremental_assets.errors import CursorError
from incremental_assets.lake import LakeFacts
from incremental_assets.plan import WindowPlan, lower_bound_of, plan_from_bounds, start_of
from incremental_assets.results import StoredState
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor
from incremental_assets.sources.database import Connection, Database, described, fetch_row
from incremental_assets.sources.freeze_sql import freeze, relation_of
from incremental_assets.sources.jdbc import refuse_session_names
from incremental_assets.sources.listing import listing_fingerprint
from incremental_assets.window import Window, render_window


@dataclass(frozen=True)
class Unchanged:
    """What the check found: the window a run would have read, and its fingerprint."""

    plan: WindowPlan
    fingerprint: str


def files_listing(table: TableSpec) -> str | None:
    """A files table's listing fingerprint, taken before a run reads anything."""
    if not isinstance(table.source, FilesSourceSpec):
        return None
    return listing_fingerprint(table.source, table.table or "")


def next_fingerprint(table: TableSpec, plan: WindowPlan, listing: str | None) -> str | None:
    """The fingerprint this run records for the next one, or None if it can't be had."""
    if plan.cursor is None or plan.recorded_cursor is None or plan.backfill:
        return None
    if listing is not None:
        bounds = plan.bounds
        held_back = (
            bounds is not None
            and bounds.newest is not None
            and bounds.newest != plan.recorded_cursor
        )
        # Rows a later clock would release (safety_lag, the future cap) need no new file.
        return None if held_back else listing
    return _rows_fingerprint(table, _window(table, plan.cursor, plan.recorded_cursor))


def prove_unchanged(
    table: TableSpec, stored: StoredState, lake: LakeFacts, asked: RunRequest
) -> Unchanged | None:
    """The proof that a run would find nothing new, or None when it can't be given."""
    cursor = _checkable(table, stored, lake, asked)
    if cursor is None or kind_of_run(table, asked, stored, lake, source=None).full_refresh:
        return None
    check_lake_fits(table, stored, lake)
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


def _checkable(
    table: TableSpec, stored: StoredState, lake: LakeFacts, asked: RunRequest
) -> Cursor | None:
    """The cursor to check against, when nothing else already says that Spark must run."""
    if (
        asked.full_refresh
        or asked.backfill
        or table.mode is Mode.FULL_REFRESH
        or table.cursor is None
        or table.reconcile_tolerance is not None  # the check counts the source with Spark
        or stored.cursor is None
        or stored.cursor_type is None
        or stored.window_fingerprint is None
        or stored.cursor_column != table.cursor.column
        or stored.settings != asked.settings  # a change goes through the run with Spark
        or lake.pending
        or (lake.head is not None and lake.head.txn != stored.lake_commit)  # unrecorded
    ):
        return None
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
            window = _window(table, cursor, previous)
            fingerprint = _fetch_fingerprint(conn, database, relation_of(table), window)
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
        window=_window(table, cursor, previous),
        new_cursor=previous,
    )


def _window(table: TableSpec, cursor: Cursor, upper: CursorValue) -> Window:
    """From the lower bound a run after `upper` would start at, up to `upper`."""
    lower, _ = lower_bound_of(table, cursor, upper, replace_all=False)
    return Window(cursor.column, cursor.type, lower, upper)


def _rows_fingerprint(table: TableSpec, window: Window) -> str | None:
    assert isinstance(table.source, JdbcSourceSpec)
    database = database_of(table.source)
    try:
        conn = database.connect(table.source)
        try:
            return _fetch_fingerprint(conn, database, relation_of(table), window)
        finally:
            conn.close()
    except database.driver_errors:
        return None  # the next run can't prove anything, and runs Spark


def _fetch_fingerprint(conn: Connection, database: Database, relation: str, window: Window) -> str:
    """Rows and digest of the window, and a digest of the columns' names and types.

    The types count because a run refuses a narrowed column and applies a widened one, though
    the rows' text may not change.
    """
    columns = described(conn, relation)
    where = render_window(window, database.dialect)
    row = fetch_row(conn, database.fingerprint_sql(relation, where, [str(c[0]) for c in columns]))
    text = ";".join(" ".join(map(str, column)) for column in columns)
    types = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
    return f"{row['n']}:{row['digest']}:{types}"
