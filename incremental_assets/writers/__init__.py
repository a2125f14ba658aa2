"""Writers: put a run's rows into the lake table, atomically and idempotently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from incremental_assets.config import Mode
from incremental_assets.lake import LakeTable
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.writers.append import AppendWriter
from incremental_assets.writers.base import Writer
from incremental_assets.writers.merge import MergeWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def writer_for(mode: Mode, spark: SparkSession, lake: LakeTable) -> Writer[Any]:
    """Merge tables get an upsert by key, append and full_refresh tables a batch per run: in
    the lake's format, the one place it is told apart (Spark writes Iceberg tables itself;
    plain Parquet tables are folders of files it stages and a journal commits). Each writer
    holds its lake as what it is."""
    merge = mode is Mode.MERGE
    match lake:
        case IcebergLake():
            from incremental_assets.writers.iceberg import IcebergAppendWriter
            from incremental_assets.writers.iceberg_merge import IcebergMergeWriter

            return IcebergMergeWriter(spark, lake) if merge else IcebergAppendWriter(spark, lake)
        case ParquetLake():
            return MergeWriter(spark, lake) if merge else AppendWriter(spark, lake)
    raise TypeError(f"no writer for a lake of format {lake.format}")
