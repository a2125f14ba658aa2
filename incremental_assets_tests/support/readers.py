"""Readers of the Iceberg lake other than this package: DuckDB, offline."""

from __future__ import annotations

from pathlib import Path

import duckdb


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
