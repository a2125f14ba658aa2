"""A folder of Parquet, CSV or JSON files, read by Spark with the window pushed into the scan.

There is no server clock: `safety_lag` and the future cap use this process's clock, and there are
no transactions to wait for. Files that land with cursor values below the last cursor are only
read again through `lookback`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.config import FilesSourceSpec, TableSpec
from incremental_assets.dialects import SPARK_SQL, Dialect, local_clock
from incremental_assets.errors import ConfigError, TableProblem
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    decode_upper,
    freeze_window,
    join_conditions,
    selected,
)
from incremental_assets.sources.failures import failures_of
from incremental_assets.spark_api import F, T, column_named
from incremental_assets.window import Window, render_window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
            return selected(self.table, self._frame().schema)

    def freeze(self, request: FreezeRequest) -> Bounds:
        d, kind = self.dialect, request.cursor.type
        cursor = d.quote(request.cursor.column)
        in_window = render_window(freeze_window(request), d)
        loadable = join_conditions([in_window, request.lagged(d)])
        with failures_of(self.table, "the bounds query"):
            frame = self._frame()
            row = frame.selectExpr(
                f"{d.wire(kind, f'max(CASE WHEN {loadable} THEN {cursor} END)')} AS upper",
                f"{d.wire(kind, f'max(CASE WHEN {in_window} THEN {cursor} END)')} AS newest",
                f"count_if({loadable}) AS n",
                f"count_if({cursor} IS NULL) AS null_rows",
            ).collect()[0]
            upper = decode_upper(self.table, request.cursor, row["upper"])
            ties = (
                0 if upper is None else frame.where(f"{cursor} = {d.literal(kind, upper)}").count()
            )
        future = None
        if request.limits.future_tolerance is not None:
            future = local_clock(kind, request.limits.future_tolerance, request.timezone)
        return Bounds(
            upper,
            int(row["n"]),
            newest=decode_upper(self.table, request.cursor, row["newest"]),
            null_rows=int(row["null_rows"]),
            boundary_rows=ties,
            future_cap=future,
        )

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        with failures_of(self.table, "opening the read"):
            frame = self._frame().select(
                *[column_named(name) for name in self.schema().fieldNames()]
            )
            return (
                frame
                if window is None
                else frame.where(F.expr(render_window(window, self.dialect)))
            )

    def read_keys(self) -> DataFrame:
        with failures_of(self.table, "reading the primary keys"):
            return self._frame().select(*[column_named(c) for c in self.table.primary_key])

    def match_key(self) -> tuple[str, ...]:
        return self.table.primary_key

    def weighed_by(self) -> dict[str, str]:
        return {}

    def primary_key(self) -> tuple[str, ...]:
        raise ConfigError(
            TableProblem(
                self.table.name,
                "files carry no key.",
                "primary_key",
                "name the key columns: primary_key: [id].",
            )
        )
