"""How an Iceberg merge table is partitioned by its key, end to end: a key too sparse for a
`truncate` width Iceberg can express (its widths are 32-bit) still loads, merges and refreshes."""

from __future__ import annotations

from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads
from incremental_assets_tests.support.orders import ICEBERG
from incremental_assets_tests.support.postgres import Schema

ITEMS = "CREATE TABLE items (id bigint PRIMARY KEY, note text NOT NULL, at timestamptz NOT NULL)"
# Snowflake-like ids: six rows over most of the bigint range.
SPARSE_IDS = (-9 * 10**18, 1, 2, 8_000_000_000, 2**40, 9 * 10**18)


def _insert(pg: Schema, ids: tuple[int, ...], note: str, hour: int) -> None:
    at = f"TIMESTAMPTZ '2025-01-01 00:00:00+00' + INTERVAL '{hour} hour'"
    rows = ", ".join(f"({i}, '{note}', {at})" for i in ids)
    pg.execute(f"INSERT INTO items VALUES {rows}")


def _held(pg: Schema) -> list[tuple[object, ...]]:
    return sorted(pg.query("SELECT id, note FROM items"))


def test_a_sparse_integer_key_is_hashed_into_buckets_and_loads_merges_and_refreshes(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(ITEMS)
    _insert(pg, SPARSE_IDS, "v0", 0)
    loads.configure(pg, ITEMS_MERGE, lake=ICEBERG, bucket_rows=2)

    first = loads.run()

    assert first.success, first.failure
    spec = loads.iceberg_table().spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("id_bucket", "bucket[3]")]
    assert loads.rows(["id", "note"]) == _held(pg)

    pg.execute(
        "UPDATE items SET note = 'v1', at = TIMESTAMPTZ '2025-01-02 00:00:00+00' "
        f"WHERE id IN ({SPARSE_IDS[0]}, {SPARSE_IDS[-1]})"
    )
    _insert(pg, (2**62, -(2**62)), "v1", 24)
    merged = loads.run()

    assert merged.success, merged.failure
    assert (merged.metadata["rows_inserted"], merged.metadata["rows_updated"]) == (2, 2)
    assert loads.rows(["id", "note"]) == _held(pg)

    refreshed = loads.run(full_refresh=True)

    assert refreshed.success, refreshed.failure
    assert loads.rows(["id", "note"]) == _held(pg)
    fields = loads.iceberg_table().spec().fields
    assert [(f.name, str(f.transform)) for f in fields] == [("id_bucket", "bucket[3]")]
