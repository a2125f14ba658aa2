"""A merge table whose key changes: its rows are matched again under the new key, and what the
same run's window deletes (a delete column, or keys reconcile finds gone) is removed with them."""

from __future__ import annotations

import pytest

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema

TABLE = {
    "name": "orders",
    "mode": "merge",
    "cursor": "updated_at",
    "delete_column": "deleted",
    "deletes": "reconcile",
    "transaction_cap": False,
}


def _source(pg: Schema) -> list[tuple[object, ...]]:
    return sorted(pg.query("SELECT region, id, v FROM orders WHERE NOT deleted"))


@pytest.mark.parametrize("new_key", ["region, id", "id, region"])
def test_rows_deleted_in_the_window_where_the_key_changes_are_gone(
    loads: Loads, pg: Schema, lake_format: LakeFormat, new_key: str
) -> None:
    """The review's finding: a key recreated as (region, id), with soft deletes in the same
    window, left the deleted rows in the lake for good and reported nothing deleted."""
    pg.execute(
        "CREATE TABLE orders (id bigint, region text NOT NULL, v text NOT NULL, "
        "deleted boolean NOT NULL DEFAULT false, updated_at timestamptz NOT NULL, "
        "PRIMARY KEY (id))"
    )
    pg.execute(
        "INSERT INTO orders (id, region, v, updated_at) SELECT i, 'eu', 'v1', "
        "TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 20) i"
    )
    loads.configure(pg, TABLE)
    assert loads.run().success
    later = "TIMESTAMPTZ '2025-02-01 00:00:00+00'"
    pg.execute(f"ALTER TABLE orders DROP CONSTRAINT orders_pkey, ADD PRIMARY KEY ({new_key})")
    pg.execute(f"UPDATE orders SET deleted = true, updated_at = {later} WHERE id IN (3, 4, 5)")
    pg.execute(f"UPDATE orders SET v = 'v2', updated_at = {later} WHERE id IN (6, 7)")
    pg.execute("DELETE FROM orders WHERE id IN (8, 9)")  # hard deletes: reconcile finds them gone
    pg.execute(f"INSERT INTO orders (id, region, v, updated_at) VALUES (21, 'us', 'v1', {later})")

    changed = loads.run()

    assert changed.success, changed.failure
    assert loads.rows(["region", "id", "v"]) == _source(pg)
    md = changed.metadata
    assert (md["rows_inserted"], md["rows_updated"], md["rows_deleted"]) == (1, 2, 5)
    again = loads.run()
    assert again.success, again.failure
    assert loads.rows(["region", "id", "v"]) == _source(pg)
