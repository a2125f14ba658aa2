"""Writers: put a run's rows into the lake table, atomically and idempotently."""

from __future__ import annotations

from pyspark.sql import SparkSession

from incremental_assets.config import Mode
from incremental_assets.writers.append import AppendWriter
from incremental_assets.writers.base import Writer
from incremental_assets.writers.merge import MergeWriter


def writer_for(mode: Mode, spark: SparkSession) -> Writer:
    """Merge tables get the bucketed upsert; append and full_refresh tables write batches."""
    return MergeWriter(spark) if mode is Mode.MERGE else AppendWriter(spark)
