"""Column names that need quoting everywhere: a space, a quote, a backtick, a dot, a name Spark
gives one of its own columns (`count`)."""

from __future__ import annotations

import pytest

from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema

KEY, CURSOR = ("k`ey", "count"), "up dated"
TABLE = (
    'CREATE TABLE orders ("k`ey" bigint, count int, "a.b" int, "it\'s" text, "we`ird" text, '
    '"up dated" timestamptz NOT NULL, PRIMARY KEY ("k`ey", count))'
)
ROWS = (
    "INSERT INTO orders SELECT i, 1, i, 'x', 'y', "
    "TIMESTAMPTZ '2025-01-01' + i * INTERVAL '1 minute' FROM generate_series(1, 10) i"
)


@pytest.mark.parametrize("mode", ["merge", "append"])
def test_columns_named_with_a_backtick_a_space_a_quote_or_a_dot_load_merge_and_reconcile(
    loads: Loads, pg: Schema, lake_format: LakeFormat, mode: str
) -> None:
    pg.execute(TABLE, ROWS)
    # A merge table partitioned by its key (partitions of two rows), deletes reconciled.
    reconcile = {"deletes": "reconcile", "bucket_rows": 2} if mode == "merge" else {}
    loads.configure(
        pg, {"name": "orders", "mode": mode, "primary_key": list(KEY), **reconcile}, cursor=CURSOR
    )
    first = loads.run()
    assert first.success, first.failure
    pg.execute(
        'UPDATE orders SET "we`ird" = \'z\', "up dated" = "up dated" + INTERVAL \'1 day\' '
        'WHERE "k`ey" <= 3',
        'DELETE FROM orders WHERE "k`ey" = 10',
    )

    second = loads.run()

    assert second.success, second.failure
    rows = sorted(loads.rows([KEY[0], "a.b", "it's", "we`ird"]))
    changed = [(i, i, "x", "z") for i in range(1, 4)]
    if mode == "merge":
        assert rows == [*changed, *[(i, i, "x", "y") for i in range(4, 10)]]  # 10 reconciled
    else:
        assert rows == sorted([*changed, *[(i, i, "x", "y") for i in range(1, 11)]])
