"""Readers of the Iceberg lake other than this package: the lake they read (a merge table's
runs), and DuckDB, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.orders import ORDERS_TABLE, create_orders, orders_held
from incremental_assets_tests.support.postgres import Schema

MERGE = {**ORDERS_TABLE, "mode": "merge"}
# Each run's metadata, and the source's (id, note) rows then.
History = list[tuple[dict[str, Any], list[tuple[Any, ...]]]]


def merge_history(loads: Loads, pg: Schema) -> History:
    """Three runs of a merge table merge-on-read, hard deletes reconciled on every run."""
    create_orders(pg, 200)
    loads.configure(pg, MERGE, lake={"format": "iceberg"}, deletes="reconcile", reconcile_every=1)
    runs = []
    for run in range(3):
        if run:
            _change(pg, run)
        result = loads.run()
        assert result.success, result.failure
        runs.append((result.metadata, orders_held(pg)))
    return runs


def _change(pg: Schema, run: int) -> None:
    """Update a few rows, delete one, add one: a merge that writes deletes and new rows (too
    few for maintenance to compact them away)."""
    at = f"TIMESTAMPTZ '2025-02-01 00:00:00+00' + INTERVAL '{run} hour'"
    pg.execute(
        f"UPDATE orders SET note = 'v{run}', updated_at = {at} WHERE id % 50 = {run}",
        f"DELETE FROM orders WHERE id = {run * 3}",
        f"INSERT INTO orders VALUES ({1000 + run}, 'new{run}', {at})",
    )


def duckdb_reader() -> duckdb.DuckDBPyConnection:
    """DuckDB with its Iceberg extension from the PyPI packages the docs name (DuckDB would
    download it otherwise); `iceberg_scan(<metadata file>)` then reads a table with its deletes."""
    import duckdb_ext

    extensions = Path(next(iter(duckdb_ext.__path__))) / "extensions"  # a namespace package
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"SET extension_directory = '{extensions}'")
    connection.execute("SET autoinstall_known_extensions = false")
    connection.execute("LOAD avro")
    connection.execute("LOAD iceberg")
    return connection
