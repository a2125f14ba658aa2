"""Sources: where a table's rows come from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.sources.base import Source
from incremental_assets.sources.database import Database
from incremental_assets.sources.files import FilesSource
from incremental_assets.sources.jdbc import JdbcSource
from incremental_assets.sources.mysql import MYSQL_DATABASE
from incremental_assets.sources.postgres import POSTGRES_DATABASE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DATABASES: dict[str, Database] = {"postgres": POSTGRES_DATABASE, "mysql": MYSQL_DATABASE}


def database_of(source: JdbcSourceSpec) -> Database:
    """The database a JDBC source reads: PostgreSQL, or MySQL and MariaDB."""
    return _DATABASES[source.kind]


def open_source(spark: SparkSession, table: TableSpec) -> Source:
    if isinstance(table.source, JdbcSourceSpec):
        return JdbcSource(spark, table, database_of(table.source))
    return FilesSource(spark, table)
