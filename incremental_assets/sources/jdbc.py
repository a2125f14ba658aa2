"""PostgreSQL over Spark's JDBC reader.

Every statement is SQL this module renders itself, so what reaches the server is exactly the
window predicate, with exact literals:

* for the transaction cap, one statement reads the other sessions' open transactions first;
* one bounds query freezes the upper bound (max cursor in the window, capped at now - safety_lag
  and below the transaction cap) and measures what else the run needs: the row count and key
  range for partitioning, NULL cursors, ties at the bound, the clock for the future cap;
* the read is `spark.read.jdbc(..., predicates=[...])` over
  `(SELECT <columns> FROM <table> WHERE <window>) AS src`, one predicate per Spark partition,
  each a range of the partition column.

Some columns don't survive the JDBC driver exactly, so they travel in a neutral form and are
rebuilt in Spark: `timestamp` and `timestamptz` as microseconds since the epoch and `date` as days,
because the driver turns wall-clock values into instants in the JVM's zone (shifting the ones that
don't exist there) and misreads offsets with seconds (early years, local mean time); and `numeric`
without a declared precision (or with more than 38 digits) as text, because Spark would round it
to decimal(38,18) (or (38,s)) silently. One-dimensional arrays of these travel element by element
in the same forms; arrays of more dimensions are refused.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType
from incremental_assets.errors import ConfigError
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    default_parallelism,
    partition_count,
    selected,
    split_ranges,
)
from incremental_assets.sources.failures import failures_of
from incremental_assets.sources.postgres import (
    APPLICATION_NAME,
    OPEN_TRANSACTIONS,
    OpenTransactions,
    bounds_from_row,
    bounds_sql,
    relation_of,
)
from incremental_assets.window import POSTGRES, Dialect, Window, render_window, sql_string


class JdbcSource:
    dialect: Dialect = POSTGRES

    def __init__(self, spark: SparkSession, table: TableSpec) -> None:
        assert isinstance(table.source, JdbcSourceSpec)
        self.spark = spark
        self.table = table
        self.source: JdbcSourceSpec = table.source
        self.relation = relation_of(table)
        self._schema: T.StructType | None = None
        _refuse_application_name(table, self.source)

    def describe(self) -> str:
        return f"{self.table.source_object} in {self.source.redacted_url()}"

    def _options(self) -> dict[str, str]:
        options = {
            "url": self.source.url,
            "driver": self.source.driver,
            "fetchsize": str(self.source.fetchsize),
            "ApplicationName": APPLICATION_NAME,
            "preferTimestampNTZ": "true",
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
                schema = selected(self.table, reader.option("dbtable", self.relation).load().schema)
            self._check_arrays(schema)
            self._schema = schema
        return self._schema

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns, in key order, from PostgreSQL's catalog."""
        sql = (
            "SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indrelid = CAST({sql_string(str(self.table.table))} AS regclass) AND i.indisprimary "
            "ORDER BY array_position(CAST(i.indkey AS int2[]), a.attnum)"
        )
        return tuple(row["name"] for row in self._query(sql, "reading the primary key"))

    def _query(self, sql: str, doing: str) -> list[T.Row]:
        with failures_of(self.table, doing):
            return (
                self.spark.read.format("jdbc")
                .options(**self._options())
                .option("query", sql)
                .load()
                .collect()
            )

    def freeze(self, request: FreezeRequest) -> Bounds:
        capped = request.limits.transaction_cap
        return self.freeze_below(request, self.open_transactions() if capped else None)

    def open_transactions(self) -> OpenTransactions:
        """Other sessions' open transactions, read in a statement of its own."""
        return OpenTransactions.from_row(
            self._query(OPEN_TRANSACTIONS, "reading the open transactions")[0].asDict()
        )

    def freeze_below(self, request: FreezeRequest, open_: OpenTransactions | None) -> Bounds:
        """The bounds query, kept below `open_` (read before it) when the transaction cap applies."""
        row = self._query(bounds_sql(self.relation, request, open_), "the bounds query")[0]
        return bounds_from_row(self.table, request, row.asDict(), open_)

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        window_sql = render_window(window, self.dialect) if window is not None else "TRUE"
        predicates = [self._range_sql(partitioning, r) for r in self._ranges(bounds, partitioning)]
        return self._read_exactly(self.schema().fields, window_sql, predicates, "opening the read")

    def read_keys(self) -> DataFrame:
        """Every primary key in the source, for reconciling hard deletes.

        Keys travel like the delta does: a timestamp key read through the driver's own conversion
        could come back shifted (a wall-clock value in a daylight saving gap of the JVM's zone),
        and the lake's key would look deleted.
        """
        schema = self.schema()
        keys = [schema[column] for column in self.table.primary_key]
        return self._read_exactly(keys, "TRUE", ["TRUE"], "reading the primary keys")

    def _read_exactly(
        self, fields: list[T.StructField], where: str, predicates: list[str], doing: str
    ) -> DataFrame:
        """`fields` of the rows matching `where`, one Spark partition per predicate, rebuilt exactly."""
        columns = ", ".join(self._select(field) for field in fields)
        relation = f"(SELECT {columns} FROM {self.relation} WHERE {where}) AS src"
        with failures_of(self.table, doing):
            frame = self.spark.read.jdbc(
                self.source.url, relation, predicates=predicates, properties=self._options()
            )
            return frame.select(*[self._rebuild(field) for field in fields])

    def _select(self, field: T.StructField) -> str:
        column = self.dialect.quote(field.name)
        scalar, dimensions = _scalar_type(field.dataType)
        if not _travels_neutral(field, scalar):
            return column
        if dimensions == 0:
            return f"{_neutral_sql(field.name, scalar, column)} AS {column}"
        element = _neutral_sql(field.name, scalar, "_e.v")
        ndims = f"array_ndims({column})"
        refuse = _refusal(
            f"{sql_string(f'column {field.name} holds a ')} || {ndims} || '-dimensional array'"
        )
        if isinstance(scalar, T.DecimalType):
            refuse = f"CAST({refuse} AS TEXT)"
        # Element by element, in order; a NULL array stays NULL rather than becoming empty.
        return (
            f"CASE WHEN {ndims} > 1 THEN ARRAY[{refuse}] WHEN {column} IS NOT NULL THEN ARRAY("
            f"SELECT {element} FROM unnest({column}) WITH ORDINALITY AS _e(v, i) ORDER BY _e.i) "
            f"END AS {column}"
        )

    def _rebuild(self, field: T.StructField) -> Column:
        column = F.col(f"`{field.name}`")
        scalar, dimensions = _scalar_type(field.dataType)
        if not _travels_neutral(field, scalar):
            return column
        if dimensions == 0:
            return self._rebuild_value(field.name, scalar, column).alias(field.name)
        rebuilt = F.transform(column, lambda e: self._rebuild_value(field.name, scalar, e))
        return rebuilt.alias(field.name)

    def _rebuild_value(self, name: str, scalar: T.DataType, value: Column) -> Column:
        if isinstance(scalar, T.TimestampNTZType):
            # Pure arithmetic on wall-clock values: no time zone is consulted.
            epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
            return F.timestamp_add("MICROSECOND", value, epoch)
        if isinstance(scalar, T.TimestampType):
            return F.timestamp_micros(value)
        if isinstance(scalar, T.DateType):
            return F.date_from_unix_date(value)
        assert isinstance(scalar, T.DecimalType)
        message = F.concat(
            F.lit(f"column '{name}' of table '{self.table.name}' holds "),
            value,
            F.lit(
                f", which {scalar.simpleString()} can't hold exactly. Fix: declare the column "
                "numeric(p,s) with p <= 38, or cast it in `query:` (to text to keep every digit)"
            ),
        )
        fits = value.isNull() | value.rlike(_decimal_pattern(scalar))
        return F.when(fits, value.cast(scalar)).otherwise(F.raise_error(message))

    def _check_arrays(self, schema: T.StructType) -> None:
        """Arrays of more than one dimension of the types that travel in a neutral form."""
        for field in schema.fields:
            scalar, dimensions = _scalar_type(field.dataType)
            if dimensions > 1 and _travels_neutral(field, scalar):
                raise ConfigError(
                    f"Table '{self.table.name}': column '{field.name}' is a {dimensions}-dimensional "
                    f"array of {scalar.simpleString()}, which can't be read exactly. Fix: cast it in "
                    f"`query:` (CAST({field.name} AS text)), or select the elements you need."
                )

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


def _scalar_type(data_type: T.DataType) -> tuple[T.DataType, int]:
    """The type of a column, or of its arrays' elements, and how many array dimensions it has."""
    dimensions = 0
    while isinstance(data_type, T.ArrayType):
        data_type, dimensions = data_type.elementType, dimensions + 1
    return data_type, dimensions


def _travels_neutral(field: T.StructField, scalar: T.DataType) -> bool:
    """Whether the column (or its elements) travels as epoch numbers or as text."""
    return isinstance(scalar, T.TimestampNTZType | T.TimestampType | T.DateType) or (
        _is_wide_numeric(field, scalar)
    )


def _is_wide_numeric(field: T.StructField, scalar: T.DataType) -> bool:
    """A `numeric` Spark may round: without (p,s) it reports decimal(38,18), above 38 digits (38,s)."""
    return (
        isinstance(scalar, T.DecimalType)
        and scalar.precision == 38
        and (field.metadata or {}).get("jdbcClientType") in ("numeric", "_numeric")
    )


def _neutral_sql(name: str, scalar: T.DataType, value: str) -> str:
    """A value as epoch micros (timestamps), epoch days (dates) or text (numerics)."""
    if isinstance(scalar, T.DecimalType):
        return f"CAST({value} AS TEXT)"
    kind = CursorType.DATE if isinstance(scalar, T.DateType) else CursorType.TIMESTAMPTZ
    epoch = POSTGRES.epoch(kind, value)
    # 'infinity' has no epoch number.
    refuse = _refusal(f"{sql_string(f'column {name} holds ')} || CAST({value} AS TEXT)")
    return f"CASE WHEN isfinite({value}) OR {value} IS NULL THEN {epoch} ELSE {refuse} END"


def _refusal(message: str) -> str:
    """Fails when evaluated: casting the message to a number is how plain SQL raises it.

    The message must depend on a column, or the planner evaluates it ahead of time.
    """
    return f"CAST({message} AS BIGINT)"


def _decimal_pattern(data_type: T.DecimalType) -> str:
    """PostgreSQL's text of a numeric that `data_type` holds exactly (trailing zeros aside)."""
    whole, scale = data_type.precision - data_type.scale, data_type.scale
    integer = f"[0-9]{{1,{whole}}}" if whole else "0"
    fraction = rf"(\.[0-9]{{1,{scale}}}0*)?" if scale else r"(\.0+)?"
    return f"^-?{integer}{fraction}$"


def _refuse_application_name(table: TableSpec, source: JdbcSourceSpec) -> None:
    """Our sessions must carry our name: the transaction cap tells our reads from writers by it."""
    settings = [*source.properties, *(k for k, _ in parse_qsl(urlparse(source.url).query))]
    if any(name.lower() == "applicationname" for name in settings):
        raise ConfigError(
            f"Table '{table.name}': source '{source.name}' sets ApplicationName, but this loader "
            f"names its sessions application_name '{APPLICATION_NAME}' so that the transaction "
            "cap doesn't wait on its own reads (or on another table's). Fix: remove ApplicationName "
            f"from the properties and the url of source '{source.name}'."
        )
