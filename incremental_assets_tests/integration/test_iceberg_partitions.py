"""How an Iceberg merge table is partitioned by its key, end to end: a key too sparse for a
`truncate` width Iceberg can express (its widths are 32-bit) still loads, merges and refreshes."""

from __future__ import annotations

from incremental_assets.lake.iceberg.partitions import partition_spec
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
    fields = loads.iceberg_table().spec().fields  # 8 rows now: 4 buckets of 2
    assert [(f.name, str(f.transform)) for f in fields] == [("id_bucket_4", "bucket[4]")]


def _spec(loads: Loads) -> list[tuple[str, str]]:
    return [(f.name, str(f.transform)) for f in loads.iceberg_table().spec().fields]


def test_a_changed_partition_setting_applies_at_the_next_full_refresh_and_merges_go_on(
    loads: Loads, pg: Schema
) -> None:
    """The review's finding: once a table was partitioned, a new `bucket_rows` (or `buckets`)
    was ignored, even by a full refresh, which kept the old width. Now the full refresh changes
    the table's spec in place (a field named after its width, so no spec gives `id_trunc` two
    meanings, which MERGE INTO refuses) and writes the rows under it; merges go on after it,
    and after a change back."""
    pg.execute(ITEMS)
    _insert(pg, tuple(range(1, 41)), "v0", 0)
    loads.configure(pg, ITEMS_MERGE, lake=ICEBERG, bucket_rows=10)
    assert loads.run().success
    assert _spec(loads) == [("id_trunc", "truncate[10]")]

    for hour, bucket_rows in enumerate([20, 10], 1):
        loads.configure(pg, ITEMS_MERGE, lake=ICEBERG, bucket_rows=bucket_rows)
        incremental = loads.run()
        assert incremental.success, incremental.failure
        refreshed = loads.run(full_refresh=True)
        assert refreshed.success, refreshed.failure
        ((rows, low, high),) = pg.query("SELECT count(*), min(id), max(id) FROM items")
        (field,) = partition_spec("id", rows, (low, high), bucketable=True, bucket_rows=bucket_rows)
        width = field.removeprefix("truncate(").partition(",")[0]
        assert _spec(loads) == [(f"id_trunc_{width}", f"truncate[{width}]")]
        pg.execute(
            f"UPDATE items SET note = 'v{hour}', at = TIMESTAMPTZ '2025-01-01 00:00:00+00' "
            f"+ INTERVAL '{24 * hour} hour' WHERE id % 7 = {hour}"
        )
        _insert(pg, (100 + hour,), f"v{hour}", 24 * hour)
        merged = loads.run()
        assert merged.success, merged.failure
        assert (merged.metadata["rows_inserted"], merged.metadata["rows_updated"]) == (1, 6)
        assert loads.rows(["id", "note"]) == _held(pg)


def test_merges_go_on_after_a_changed_width_then_a_type_only_a_new_table_can_hold(
    loads: Loads, pg: Schema
) -> None:
    """The review's finding: a full refresh changed the width in place (`id_trunc_130`), then
    a change of the key's type made the table be created again, naming its field `id_trunc`
    for the new width while the first spec's `id_trunc` had another: every MERGE INTO after
    it failed ("multiple fields for name _partition.id_trunc"), a full refresh included."""
    pg.execute(ITEMS.replace("id bigint", "id integer"))
    _insert(pg, tuple(range(1, 41)), "v0", 0)
    loads.configure(pg, ITEMS_MERGE, lake=ICEBERG, bucket_rows=10)
    assert loads.run().success
    _insert(pg, tuple(range(1001, 1041)), "v0", 1)
    assert loads.run(full_refresh=True).success  # a wider span: another width, in place
    assert _spec(loads)[0][0].startswith("id_trunc_")
    pg.execute("ALTER TABLE items ALTER COLUMN id TYPE numeric(20, 0)")  # the table made again

    for hour in (2, 3):
        pg.execute(
            f"UPDATE items SET note = 'v{hour}', at = TIMESTAMPTZ '2025-01-01 00:00:00+00' "
            f"+ INTERVAL '{hour} day' WHERE id % 9 = {hour}"
        )
        merged = loads.run()
        assert merged.success, merged.failure
        assert loads.rows(["id", "note"]) == _held(pg)
    refreshed = loads.run(full_refresh=True)
    assert refreshed.success, refreshed.failure
    pg.execute("UPDATE items SET note = 'v4', at = TIMESTAMPTZ '2025-02-01 00:00:00+00'")
    merged = loads.run()
    assert merged.success, merged.failure
    assert loads.rows(["id", "note"]) == _held(pg)
