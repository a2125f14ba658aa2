"""PostgreSQL over Spark's JDBC reader.

Every statement is SQL this module renders itself, so what reaches the server is exactly the
window predicate, with exact literals:

* one bounds query freezes the upper bound (max cursor, capped at now - safety_lag) and sizes the
  read (row count and the partition column's range), all in the window's lower bound;
* the read is `spark.read.jdbc(..., predicates=[...])`: one predicate per Spark partition, each the
  same window AND one value range of the partition column.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from incremental_assets.cursor import CursorType, decode_wire
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    decode_upper,
    default_parallelism,
    join_conditions,
    partition_count,
    split_ranges,
)
from incremental_assets.sources.failures import failures_of
from incremental_assets.spec import JdbcSourceSpec, TableSpec
from incremental_assets.window import POSTGRES, Dialect, Window, render_window


class JdbcSource:
    dialect: Dialect = POSTGRES

    def __init__(self, spark: SparkSession, table: TableSpec) -> None:
        assert isinstance(table.source, JdbcSourceSpec)
        self.spark = spark
        self.table = table
        self.source: JdbcSourceSpec = table.source
        self.relation = f"({table.query}) AS src" if table.query is not None else str(table.table)

    def describe(self) -> str:
        return f"{self.table.source_object} in {self.source.redacted_url()}"

    def _options(self) -> dict[str, str]:
        options = {
            "url": self.source.url,
            "driver": self.source.driver,
            "fetchsize": str(self.source.fetchsize),
            # `timestamp` columns stay wall-clock values instead of instants in the JVM's zone.
            "preferTimestampNTZ": "true",
            **self.source.properties,
        }
        if self.source.user is not None:
            options["user"] = self.source.user
        if self.source.password is not None:
            options["password"] = self.source.password
        return options

    def schema(self) -> T.StructType:
        with failures_of(self.table, "reading the schema"):
            reader = self.spark.read.format("jdbc").options(**self._options())
            return reader.option("dbtable", self.relation).load().schema

    def freeze(self, request: FreezeRequest) -> Bounds:
        sql = self.bounds_sql(request)
        with failures_of(self.table, "the bounds query"):
            reader = self.spark.read.format("jdbc").options(**self._options())
            row = reader.option("query", sql).load().collect()[0]
        partitioning = request.partitioning
        low = _partition_wire(partitioning, row["part_low"])
        high = _partition_wire(partitioning, row["part_high"])
        return Bounds(decode_upper(request.cursor, row["upper"]), int(row["n"]), low, high)

    def bounds_sql(self, request: FreezeRequest) -> str:
        d = self.dialect
        cursor = d.quote(request.cursor.column)
        conditions = [
            render_window(
                Window(request.cursor.column, request.cursor.type, lower=request.lower), d
            )
        ]
        if request.safety_lag is not None:
            conditions.append(
                f"{cursor} <= {d.now_minus(request.cursor.type, request.safety_lag, request.timezone)}"
            )
        part = request.partitioning
        part_column = d.quote(part.column) if part else "NULL"
        part_type = part.type if part else CursorType.INTEGER
        return (
            f"SELECT {d.wire(request.cursor.type, f'max({cursor})')} AS upper, count(*) AS n, "
            f"{d.wire(part_type, f'min({part_column})')} AS part_low, "
            f"{d.wire(part_type, f'max({part_column})')} AS part_high "
            f"FROM {self.relation} WHERE {join_conditions(conditions)}"
        )

    def partition_predicates(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> list[str]:
        window_sql = render_window(window, self.dialect) if window is not None else "TRUE"
        ranges = self._ranges(bounds, partitioning)
        return [join_conditions([window_sql, self._range_sql(partitioning, r)]) for r in ranges]

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
        parts = partition_count(bounds.rows, self.source.rows_per_partition, cap)
        return split_ranges(bounds.partition_low, bounds.partition_high, parts)

    def _range_sql(
        self, partitioning: Partitioning | None, bounds: tuple[int | None, int | None]
    ) -> str:
        low, high = bounds
        if partitioning is None or (low is None and high is None):
            return "TRUE"
        d = self.dialect
        column = d.quote(partitioning.column)

        def literal(wire: int | None) -> str:
            return d.literal(partitioning.type, decode_wire(partitioning.type, str(wire)))

        if low is None:
            return f"{column} < {literal(high)} OR {column} IS NULL"
        if high is None:
            return f"{column} >= {literal(low)}"
        return f"{column} >= {literal(low)} AND {column} < {literal(high)}"

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        predicates = self.partition_predicates(window, bounds, partitioning)
        with failures_of(self.table, "opening the read"):
            return self.spark.read.jdbc(
                self.source.url, self.relation, predicates=predicates, properties=self._options()
            )


def _partition_wire(partitioning: Partitioning | None, wire: str | None) -> int | None:
    return None if partitioning is None or wire is None else int(wire)
