"""The fingerprint of what the next run would read again, taken by each run for the next one.

Every run records, beside its cursor, a fingerprint of the rows from the next lower bound (the
cursor minus the lookback, ties included) up to the cursor, counted and digested by the source
database, with a digest of the columns' names and types; for files, the listing (paths, sizes,
modification times) of what the table reads. The database's fingerprint is taken after the bound
is frozen and before the rows are read, so a change made after it always shows; the listing,
before anything is read. The next run compares it without Spark (`nothing_new.py`).
"""

from __future__ import annotations

import hashlib

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorValue
from incremental_assets.plan import WindowPlan, lower_bound_of
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor
from incremental_assets.sources.database import Connection, Database, described, fetch_row
from incremental_assets.sources.freeze_sql import relation_of
from incremental_assets.sources.listing import listing_fingerprint
from incremental_assets.window import Window, render_window


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
    return _rows_fingerprint(table, window_below(table, plan.cursor, plan.recorded_cursor))


def window_below(table: TableSpec, cursor: Cursor, upper: CursorValue) -> Window:
    """From the lower bound a run after `upper` would start at, up to `upper`."""
    lower, _ = lower_bound_of(table, cursor, upper, replace_all=False)
    return Window(cursor.column, cursor.type, lower, upper)


def _rows_fingerprint(table: TableSpec, window: Window) -> str | None:
    assert isinstance(table.source, JdbcSourceSpec)
    database = database_of(table.source)
    try:
        conn = database.connect(table.source)
        try:
            return fetch_fingerprint(conn, database, relation_of(table), window)
        finally:
            conn.close()
    except database.driver_errors:
        return None  # the next run can't prove anything, and runs Spark


def fetch_fingerprint(conn: Connection, database: Database, relation: str, window: Window) -> str:
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
