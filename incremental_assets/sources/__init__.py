"""Sources: where a table's rows come from."""

from __future__ import annotations

from pyspark.sql import SparkSession

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.sources.base import Source
from incremental_assets.sources.files import FilesSource
from incremental_assets.sources.jdbc import JdbcSource


def open_source(spark: SparkSession, table: TableSpec) -> Source:
    if isinstance(table.source, JdbcSourceSpec):
        return JdbcSource(spark, table)
    return FilesSource(spark, table)
