"""A folder of Parquet, CSV or JSON files, read by Spark with the window pushed into the scan."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    decode_upper,
    join_conditions,
)
from incremental_assets.sources.failures import failures_of
from incremental_assets.spec import FilesSourceSpec, TableSpec
from incremental_assets.window import SPARK_SQL, Dialect, Window, render_window

_FORMAT_DEFAULTS = {"csv": {"header": "true"}}


class FilesSource:
    dialect: Dialect = SPARK_SQL

    def __init__(self, spark: SparkSession, table: TableSpec) -> None:
        assert isinstance(table.source, FilesSourceSpec)
        self.spark = spark
        self.table = table
        self.source: FilesSourceSpec = table.source
        self.path = f"{self.source.path.rstrip('/')}/{(table.table or '').lstrip('/')}"

    def describe(self) -> str:
        return f"{self.source.format} files at {self.path}"

    def _frame(self) -> DataFrame:
        options = {
            **_FORMAT_DEFAULTS.get(self.source.format, {}),
            **self.source.options,
            **self.table.read_options,
        }
        reader = self.spark.read.format(self.source.format).options(**options)
        if self.table.schema_ddl:
            reader = reader.schema(self.table.schema_ddl)
        return reader.load(self.path)

    def schema(self) -> T.StructType:
        with failures_of(self.table, "reading the schema"):
            return self._frame().schema

    def freeze(self, request: FreezeRequest) -> Bounds:
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
        with failures_of(self.table, "the bounds query"):
            row = (
                self._frame()
                .where(F.expr(join_conditions(conditions)))
                .selectExpr(
                    f"{d.wire(request.cursor.type, f'max({cursor})')} AS upper", "count(*) AS n"
                )
                .collect()[0]
            )
        return Bounds(decode_upper(request.cursor, row["upper"]), int(row["n"]))

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        with failures_of(self.table, "opening the read"):
            frame = self._frame()
            return (
                frame
                if window is None
                else frame.where(F.expr(render_window(window, self.dialect)))
            )
