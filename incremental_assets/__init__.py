"""Incremental table loads into a data lake (Iceberg, or plain Parquet) as Dagster assets, with
Spark doing the work."""

from incremental_assets.component import IncrementalTablesComponent
from incremental_assets.definitions import build_definitions, defs
from incremental_assets.translator import IncrementalAssetsTranslator

__all__ = [
    "IncrementalAssetsTranslator",
    "IncrementalTablesComponent",
    "build_definitions",
    "defs",
]
