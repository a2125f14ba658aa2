"""An Arrow-native PostgreSQL reader for Spark (source option `reader: arrow`).

Spark's Python Data Source API runs one task per partition predicate; each task connects with ADBC
(which reads `COPY ... (FORMAT binary)` in C++) and hands Spark Arrow record batches, so rows never
pass through the JDBC driver or Python objects. Values arrive exactly: timestamps as epoch
microseconds, numerics as text cast to the column's decimal type (a value that doesn't fit fails
the cast instead of being rounded). The bounds query, the window and the partitions are the JDBC
source's; only the read differs. Executors need `adbc-driver-postgresql` and this package.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from incremental_assets.cursor import decode_wire
from incremental_assets.probes import connect_args
from incremental_assets.sources.base import Bounds, Partitioning
from incremental_assets.sources.failures import failures_of
from incremental_assets.sources.jdbc import JdbcSource
from incremental_assets.window import Window, render_window

FORMAT = "incremental_assets_postgres_arrow"
# PostgreSQL types ADBC hands over as Arrow extension types; text is what Spark keeps for them.
_AS_TEXT = {
    "uuid",
    "json",
    "jsonb",
    "xml",
    "inet",
    "cidr",
    "macaddr",
    "money",
    "interval",
    "time",
    "timetz",
}


class ArrowPostgresSource(JdbcSource):
    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        schema = self.schema()
        columns = ", ".join(self._arrow_select(f) for f in schema.fields)
        window_sql = render_window(window, self.dialect) if window is not None else "TRUE"
        queries = [
            f"SELECT {columns} FROM {self.relation} WHERE ({window_sql}) AND ({self._literal_range(partitioning, r)})"
            for r in self._ranges(bounds, partitioning)
        ]
        options = {
            "uri": _uri(self.source),
            "queries": json.dumps(queries),
            "table": self.table.name,
        }
        with failures_of(self.table, "opening the read"):
            self.spark.dataSource.register(PostgresArrowDataSource)
            return self.spark.read.format(FORMAT).schema(schema).options(**options).load()

    def _arrow_select(self, field: T.StructField) -> str:
        column = self.dialect.quote(field.name)
        client_type = (field.metadata or {}).get("jdbcClientType", "")
        if isinstance(field.dataType, T.StringType) and client_type in _AS_TEXT:
            return f"CAST({column} AS TEXT) AS {column}"
        return column

    def _literal_range(
        self, partitioning: Partitioning | None, bounds: tuple[int | None, int | None]
    ) -> str:
        """The JDBC ranges compare read-as-epoch columns; here the column is read as it is."""
        low, high = bounds
        if partitioning is None or (low is None and high is None):
            return "TRUE"
        column = self.dialect.quote(partitioning.column)

        def literal(wire: int) -> str:
            return self.dialect.literal(
                partitioning.type, decode_wire(partitioning.type, str(wire))
            )

        if low is None:
            return f"{column} < {literal(high)} OR {column} IS NULL"  # type: ignore[arg-type]
        if high is None:
            return f"{column} >= {literal(low)}"
        return f"{column} >= {literal(low)} AND {column} < {literal(high)}"


def _uri(source: Any) -> str:
    args = connect_args(source)
    credentials = ""
    if args.get("user"):
        credentials = quote(args["user"], safe="")
        if args.get("password"):
            credentials += ":" + quote(args["password"], safe="")
        credentials += "@"
    return f"postgresql://{credentials}{args['host'].split(',')[0]}:{args['port'].split(',')[0]}/{args['dbname'] or ''}"


class PostgresArrowDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> T.StructType:
        raise ValueError("the reader is always given its schema")

    def reader(self, schema: T.StructType) -> DataSourceReader:
        return _Reader(self.options, schema)


class _Partition(InputPartition):
    def __init__(self, query: str) -> None:
        super().__init__(query)
        self.query = query


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: T.StructType) -> None:
        self.uri = options["uri"]
        self.queries = json.loads(options["queries"])
        self.table = options["table"]
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [_Partition(q) for q in self.queries]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import adbc_driver_postgresql.dbapi as adbc
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        with adbc.connect(self.uri) as conn, conn.cursor() as cursor:
            cursor.execute(partition.query)  # type: ignore[attr-defined]
            for batch in cursor.fetch_record_batch():
                columns = []
                for field, column in zip(target, batch.columns, strict=True):
                    if isinstance(column.type, pa.ExtensionType):
                        column = column.storage
                    try:
                        columns.append(column.cast(field.type))
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise ValueError(
                            f"column '{field.name}' of table '{self.table}' holds a value {field.type} can't keep "
                            f"exactly ({exc}). Fix: declare the column's precision, or cast it in `query:`"
                        ) from None
                yield pa.RecordBatch.from_arrays(columns, schema=target)
