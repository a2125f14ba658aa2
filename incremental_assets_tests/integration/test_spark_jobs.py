"""How many Spark jobs a small run takes, as its `spark_jobs` metadata says: a new pass over the
data (a count, a schema probe, a check re-reading files the run already holds) fails here.

A small append is the staged write and the lake rows its re-read rows are compared with; a small
merge is the staged delta, the ranking's shuffle and the write (its key check counted in the
same job). The statements about the source (the freeze, the key, the collations) go over a plain
connection, not as Spark jobs.
"""

from __future__ import annotations

import pytest

from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema

ORDERS = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text NOT NULL, updated_at timestamptz "
    "NOT NULL)"
)
SEED = (
    "INSERT INTO orders SELECT i, 'v0', TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL "
    "'1 second' FROM generate_series(1, 5000) i"
)
CHANGE = (
    "UPDATE orders SET note = 'v1', updated_at = TIMESTAMPTZ '2025-02-01 00:00:00+00' + id * "
    "INTERVAL '1 ms' WHERE id > 4990",
    "INSERT INTO orders SELECT i, 'v1', TIMESTAMPTZ '2025-02-01 00:00:01+00' FROM "
    "generate_series(5001, 5010) i",
)


@pytest.mark.parametrize(("mode", "jobs"), [("append", 2), ("merge", 3)])
def test_a_small_delta_takes_a_handful_of_spark_jobs(
    loads: Loads,
    pg: Schema,
    mode: str,
    jobs: int,
) -> None:
    pg.execute(ORDERS, SEED)
    loads.configure(pg, ORDERS_MERGE, mode=mode, transaction_cap=True)
    assert loads.run().success
    pg.execute(*CHANGE)

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["rows_extracted"] == 20  # 10 updated (the tied row among them), 10 new
    assert run.metadata["spark_jobs"] == jobs, run.metadata
    assert run.metadata["spark_stages"] <= jobs + 1
    nothing = loads.run()
    assert (nothing.metadata["spark_jobs"], nothing.metadata["spark"]) == (
        0,
        "not started (nothing new)",
    )
