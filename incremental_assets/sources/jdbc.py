"""A database table or query over Spark's JDBC reader: PostgreSQL, MySQL or MariaDB.

Every statement is SQL this module (with the database's module) renders itself, so what reaches
the server is exactly the window predicate, with exact literals:

* for the transaction cap, the other sessions' open transactions are read first;
* one bounds query freezes the upper bound (`freeze_sql.py`);
* the read is `spark.read.jdbc(..., predicates=[...])` over
  `(SELECT <columns> FROM <table> WHERE <window>) AS src`, one predicate per Spark partition,
  each a range of the partition column.

Columns that don't survive the driver exactly travel in a neutral form the database's module
chooses, and are rebuilt in Spark (`transport.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlparse

from incremental_assets.config import JdbcSourceSpec, Mode, TableSpec
from incremental_assets.dialects import Dialect
from incremental_assets.errors import ConfigError, TableProblem
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    default_parallelism,
    partition_count,
    selected,
    split_ranges,
    weight_column,
)
from incremental_assets.sources.database import APPLICATION_NAME, Database, fetch_rows
from incremental_assets.sources.failures import failures_of
from incremental_assets.sources.freeze_sql import (
    freeze,
    freeze_below,
    open_transactions,
    relation_of,
)
from incremental_assets.sources.transactions import OpenTransactions
from incremental_assets.spark_api import T, column_named
from incremental_assets.window import Window, render_window

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


class JdbcSource:
    def __init__(self, spark: SparkSession, table: TableSpec, database: Database) -> None:
        assert isinstance(table.source, JdbcSourceSpec)
        self.spark = spark
        self.table = table
        self.source: JdbcSourceSpec = table.source
        self.database = database
        self.dialect: Dialect = database.dialect
        self.relation = relation_of(table)
        self._schema: T.StructType | None = None
        refuse_session_names(table, self.source, database)

    def describe(self) -> str:
        return f"{self.table.source_object} in {self.source.redacted_url()}"

    def _options(self) -> dict[str, str]:
        options = {
            "url": self.database.spark_url(self.source),
            "driver": self.source.driver,
            "fetchsize": str(self.source.fetchsize),
            **self.database.spark_options(self.source),
            **self.source.properties,
        }
        if self.source.user is not None:
            options["user"] = self.source.user
        if self.source.password is not None:
            options["password"] = self.source.password
        return options

    def schema(self) -> T.StructType:
        if self._schema is None:
            with failures_of(self.table, "reading the schema"):
                reader = self.spark.read.format("jdbc").options(**self._options())
                driver = reader.option("dbtable", self.relation).load().schema
            self._driver_schema = T.StructType(selected(self.table, driver).fields)
            self.database.check_schema(self.table, self._driver_schema)
            self._schema = T.StructType(
                [self.database.arriving(f) for f in self._driver_schema.fields]
            )
        return self._schema

    def match_key(self) -> tuple[str, ...]:
        return tuple(
            weight_column(c) if self._weight(c) is not None else c for c in self.table.primary_key
        )

    def weighed_by(self) -> dict[str, str]:
        self.schema()
        named = {
            weight_column(c): sql
            for c in self.table.primary_key
            if self._weight(c) is not None
            and (sql := self.database.collation(self._driver_schema[c])) is not None
        }
        if not named:
            return {}
        columns = ", ".join(f"{sql} AS {self.dialect.quote(name)}" for name, sql in named.items())
        rows = self._rows(
            f"SELECT {columns} FROM {self.relation} LIMIT 1", "reading the key's collation"
        )
        return {name: str(rows[0][name]) for name in named} if rows else {}

    def _weight(self, column: str) -> str | None:
        """SQL for a merge key column's weight, where the database compares it by collation.

        None for a `capture: log` table: the log gives each key as stored, so its runs match
        rows on the values, and its full load must too."""
        table = self.table
        logged = table.capture == "log"
        if table.mode is not Mode.MERGE or column not in table.primary_key or logged:
            return None
        self.schema()
        return self.database.weight(self._driver_schema[column])

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns, in key order, from the database's catalog."""
        sql = self.database.primary_key_sql(self.table)
        return tuple(str(row["name"]) for row in self._rows(sql, "reading the primary key"))

    def _rows(self, sql: str, doing: str) -> list[dict[str, Any]]:
        """The rows of a statement about the source (the freeze, its key, its collations).

        They go over a plain connection from this process when it reaches the source: a Spark job
        per statement costs more than the statement. Where it can't (a cluster-only network),
        Spark's JDBC reader runs them. The SQL is the same either way.
        """
        with failures_of(self.table, doing):
            try:
                conn = self.database.connect(self.source)
            except self.database.driver_errors:
                reader = self.spark.read.format("jdbc").options(**self._options())
                return [row.asDict() for row in reader.option("query", sql).load().collect()]
            try:
                return fetch_rows(conn, sql)
            finally:
                conn.close()

    def freeze(self, request: FreezeRequest) -> Bounds:
        return freeze(self.table, self.database, request, self._row)

    def open_transactions(self, request: FreezeRequest) -> OpenTransactions | None:
        """The freeze's first half, for a test to act between the two."""
        return open_transactions(self.table, self.database, request, self._row)

    def freeze_below(self, request: FreezeRequest, open_: OpenTransactions | None) -> Bounds:
        """The freeze's second half: the bounds query, kept below `open_`."""
        return freeze_below(self.table, self.database, request, open_, self._row)

    def _row(self, sql: str) -> dict[str, Any]:
        return self._rows(sql, "freezing the window's upper bound")[0]

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        window_sql = render_window(window, self.dialect) if window is not None else "TRUE"
        predicates = [self._range_sql(partitioning, r) for r in self._ranges(bounds, partitioning)]
        self.schema()
        fields = self._driver_schema.fields
        return self._read_exactly(fields, window_sql, predicates, "opening the read")

    def read_keys(self) -> DataFrame:
        """Every primary key in the source, for reconciling hard deletes.

        Keys travel like the delta does: a timestamp key read through the driver's own conversion
        could come back shifted (a wall-clock value in a daylight saving gap of the JVM's zone),
        and the lake's key would look deleted.
        """
        self.schema()
        keys = [self._driver_schema[column] for column in self.table.primary_key]
        return self._read_exactly(keys, "TRUE", ["TRUE"], "reading the primary keys")

    def _read_exactly(
        self, fields: list[T.StructField], where: str, predicates: list[str], doing: str
    ) -> DataFrame:
        """`fields` of the rows matching `where`, one Spark partition per predicate, rebuilt
        exactly."""
        weights = [
            (weight_column(f.name), sql)
            for f in fields
            if (sql := self._weight(f.name)) is not None
        ]
        columns = ", ".join(
            [self._select(field) for field in fields]
            + [f"{sql} AS {self.dialect.quote(name)}" for name, sql in weights]
        )
        relation = f"(SELECT {columns} FROM {self.relation} WHERE {where}) AS src"
        with failures_of(self.table, doing):
            frame = self.spark.read.jdbc(
                self.database.spark_url(self.source),
                relation,
                predicates=predicates,
                properties=self._options(),
            )
            return frame.select(
                *[self._rebuild(field) for field in fields],
                *[column_named(name) for name, _ in weights],
            )

    def _select(self, field: T.StructField) -> str:
        column = self.dialect.quote(field.name)
        sent = self.database.transport(self.table, field)
        return column if sent is None else f"{sent} AS {column}"

    def _rebuild(self, field: T.StructField) -> Column:
        column = column_named(field.name)
        if self.database.transport(self.table, field) is None:
            return column
        return self.database.rebuild(self.table, field, column).alias(field.name)

    def _ranges(
        self, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> list[tuple[int | None, int | None]]:
        if (
            partitioning is None
            or bounds is None
            or bounds.partition_low is None
            or bounds.partition_high is None
        ):
            return [(None, None)]
        cap = self.source.max_partitions or default_parallelism(self.spark)
        parts = partition_count(bounds.rows + bounds.null_rows, self.source.rows_per_partition, cap)
        return split_ranges(bounds.partition_low, bounds.partition_high, parts)

    def _range_sql(
        self, partitioning: Partitioning | None, bounds: tuple[int | None, int | None]
    ) -> str:
        """A range of the partition column as it is read: the key, epoch days or epoch micros."""
        low, high = bounds
        if partitioning is None or (low is None and high is None):
            return "TRUE"
        column = self.dialect.quote(partitioning.column)
        if low is None:
            return f"{column} < {high} OR {column} IS NULL"
        if high is None:
            return f"{column} >= {low}"
        return f"{column} >= {low} AND {column} < {high}"


def refuse_session_names(table: TableSpec, source: JdbcSourceSpec, database: Database) -> None:
    """Refuse settings our sessions pin: the name the cap knows our reads by, the time zone."""
    settings = [*source.properties, *(k for k, _ in parse_qsl(urlparse(source.url).query))]
    named = [name for name in settings if name.lower() in database.pinned_settings]
    if named:
        raise ConfigError(
            TableProblem(
                table.name,
                f"source '{source.name}' sets {named[0]}, but this loader names its sessions "
                f"'{APPLICATION_NAME}' (and pins their settings) so that the transaction cap "
                "doesn't wait on its own reads (or on another table's).",
                fix=f"remove {named[0]} from the properties and the url of source '{source.name}'.",
            )
        )
