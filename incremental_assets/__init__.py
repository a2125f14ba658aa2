"""Incremental table loads into a Parquet lake as Dagster assets, with Spark doing the work."""

from incremental_assets.definitions import defs

__all__ = ["defs"]
