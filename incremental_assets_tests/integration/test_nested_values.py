"""A merge notices a change inside a nested value, a NULL included, when the row is read again at
the cursor value it had (a date cursor's ties): each format compares rows by their content."""

from __future__ import annotations

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema


def test_a_null_added_inside_an_array_at_the_same_cursor_is_merged(
    loads: Loads, pg: Schema, lake_format: LakeFormat
) -> None:
    """The review's finding (plain Parquet): a re-read row whose array gained a NULL hashed as
    the lake's version, so the merge kept the old array for good."""
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, tags text[], at date NOT NULL)")
    pg.execute(
        "INSERT INTO items SELECT i, ARRAY['x'], DATE '2025-01-01' FROM generate_series(1, 20) i"
    )
    loads.configure(pg, ITEMS_MERGE)
    assert loads.run().success
    pg.execute("UPDATE items SET tags = ARRAY['x', NULL] WHERE id = 1")  # the same date

    changed = loads.run()

    assert changed.success, changed.failure
    assert changed.metadata["rows_updated"] == 1
    held = {row[0]: row[1] for row in loads.rows(["id", "tags"])}
    assert held[1] == ["x", None] and held[2] == ["x"]
