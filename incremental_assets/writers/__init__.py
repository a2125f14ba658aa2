"""Writers: put a run's rows into the lake table, atomically and idempotently."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.config import Mode
from incremental_assets.lake import LakeTable
from incremental_assets.writers.append import AppendWriter
from incremental_assets.writers.base import Writer
from incremental_assets.writers.merge import MergeWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def writer_for(mode: Mode, spark: SparkSession, lake: LakeTable) -> Writer:
    """Merge tables get an upsert by key, append and full_refresh tables a batch per run: in
    the lake's format (Spark writes Iceberg tables itself; plain Parquet tables are folders of
    files it stages and a journal commits)."""
    if lake.format == "iceberg":
        from incremental_assets.writers.iceberg import IcebergAppendWriter, IcebergMergeWriter

        return IcebergMergeWriter(spark) if mode is Mode.MERGE else IcebergAppendWriter(spark)
    return MergeWriter(spark) if mode is Mode.MERGE else AppendWriter(spark)
