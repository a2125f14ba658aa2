"""The benchmark's source: `bench.orders` in PostgreSQL, and the changes each scenario applies.

Values are deterministic (a function of the id), so runs on different days see the same data.
Changed rows get `updated_at = clock_timestamp()`, later than every generated row.
"""

from __future__ import annotations

import psycopg

T0 = "TIMESTAMPTZ '2024-01-01 00:00:00+00'"
SCHEMA = "bench"

CREATE = f"""
DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    note text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
)
"""


def _rows(first: int, last: int, stamp: str) -> str:
    return (
        f"SELECT i, (i * 7919) % 100000, ((i * 37) % 1000000) / 100.0, "
        f"(ARRAY['placed', 'paid', 'shipped', 'delivered'])[1 + i % 4], md5(i::text), "
        f"{T0} + i * INTERVAL '10 milliseconds', {stamp} "
        f"FROM generate_series(CAST({first} AS bigint), CAST({last} AS bigint)) AS i"
    )


def create_orders(conn: psycopg.Connection, rows: int) -> None:
    for statement in CREATE.strip().split(";\n"):
        conn.execute(statement)
    generated = f"{T0} + i * INTERVAL '10 milliseconds'"
    conn.execute(f"INSERT INTO {SCHEMA}.orders {_rows(1, rows, generated)}")
    conn.execute(f"CREATE INDEX orders_updated_at ON {SCHEMA}.orders (updated_at)")
    conn.execute(f"VACUUM ANALYZE {SCHEMA}.orders")


def apply_changes(
    conn: psycopg.Connection,
    rows: int,
    *,
    inserted: int,
    updated: int,
    recent: bool,
    offset: int = 0,
) -> None:
    """Insert new ids past the maximum and update existing rows, spread out or the most recent.

    Spread out, the updated ids are those `offset` past a multiple of the stride: the same rows
    every time for one offset (S4), a different share of the table for each (A50)."""
    (max_id,) = conn.execute(f"SELECT max(id) FROM {SCHEMA}.orders").fetchone()  # type: ignore[misc]
    if inserted:
        conn.execute(
            f"INSERT INTO {SCHEMA}.orders "
            f"{_rows(max_id + 1, max_id + inserted, 'clock_timestamp()')}"
        )
    if updated:
        if recent:
            chosen = f"id > {max_id - updated} AND id <= {max_id}"
        else:
            stride = max(1, rows // updated)
            chosen = f"id % {stride} = {offset % stride} AND id <= {stride * updated}"
        conn.execute(
            f"UPDATE {SCHEMA}.orders SET status = 'changed', amount = amount + 1, "
            f"updated_at = clock_timestamp() WHERE {chosen}"
        )
    conn.execute(f"ANALYZE {SCHEMA}.orders")


def newest(conn: psycopg.Connection) -> str:
    """The newest updated_at as exact text, the lower bound the next incremental read starts
    after."""
    (value,) = conn.execute(
        "SELECT to_char(max(updated_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') "
        f"FROM {SCHEMA}.orders"
    ).fetchone()  # type: ignore[misc]
    return f"{value}+00"
