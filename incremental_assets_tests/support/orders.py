"""The `orders` source table several test files share: its DDL, its first rows, a change that
updates some rows and adds new ones (each run's changes dated after everything before), and the
rows the lake must then hold."""

from __future__ import annotations

from typing import Any

from incremental_assets_tests.support.postgres import Schema

ORDERS = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text NOT NULL, updated_at timestamptz "
    "NOT NULL)"
)
SEED = (
    "INSERT INTO orders SELECT i, 'v0', TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL "
    "'1 second' FROM generate_series(1, {n}) i"
)
ORDERS_TABLE = {"name": "orders", "cursor": "updated_at", "primary_key": ["id"]}
ICEBERG = {"format": "iceberg"}


def create_orders(pg: Schema, rows: int) -> None:
    pg.execute(ORDERS, SEED.format(n=rows))


def change_orders(
    pg: Schema, run: int, new: int = 10, every: int = 10, delete: bool = False
) -> None:
    """Update every `every`th row and add `new` rows, dated after everything before; with
    `delete`, also delete the row whose id is `run` (a hard delete at the source)."""
    at = f"TIMESTAMPTZ '2025-02-01 00:00:00+00' + INTERVAL '{run} hour'"
    statements = [
        f"UPDATE orders SET note = 'v{run}', updated_at = {at} WHERE id % {every} = {run % every}",
        f"INSERT INTO orders SELECT i, 'v{run}', {at} FROM generate_series("
        f"(SELECT max(id) + 1 FROM orders), (SELECT max(id) + {new} FROM orders)) i",
    ]
    if delete:
        statements.append(f"DELETE FROM orders WHERE id = {run}")
    pg.execute(*statements)


def orders_held(pg: Schema) -> list[tuple[Any, ...]]:
    """(id, note) of every row the source holds, sorted: what a merge table must hold."""
    return sorted(pg.query("SELECT id, note FROM orders"))
