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
without a declared precision as text, because Spark would round it to decimal(38,18) silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import parse_qsl, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from incremental_assets.cursor import EPOCH_UTC, CursorType
from incremental_assets.errors import ConfigError
from incremental_assets.sources.base import (
    Bounds,
    FreezeRequest,
    Partitioning,
    TransactionCap,
    decode_upper,
    default_parallelism,
    freeze_window,
    join_conditions,
    partition_count,
    selected,
    split_ranges,
)
from incremental_assets.sources.failures import failures_of
from incremental_assets.spec import JdbcSourceSpec, TableSpec
from incremental_assets.window import POSTGRES, Dialect, Window, render_window

APPLICATION_NAME = "incremental_assets"
_OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
# Sessions that can hold rows back: other clients of this database, not our own read-only reads.
_WRITERS = (
    f"{_OTHER_SESSIONS} AND backend_type = 'client backend' AND xact_start IS NOT NULL "
    f"AND coalesce(application_name, '') <> '{APPLICATION_NAME}'"
)
_TRANSACTION_CAPS = (
    f"(SELECT min(xact_start) {_WRITERS}) AS oldest, "
    "(SELECT format('pid %s (%s), open since %s', pid, coalesce(nullif(application_name, ''), usename), "
    f"xact_start) {_WRITERS} ORDER BY xact_start LIMIT 1) AS holder, "
    # Without pg_read_all_stats, other roles' sessions show no transaction start at all, nor
    # their backend_type; autovacuum workers are the ones with no role.
    f"(SELECT count(*) {_OTHER_SESSIONS} AND query = '<insufficient privilege>' "
    "AND usesysid IS NOT NULL) AS hidden"
)
_OPEN_TRANSACTIONS = (
    f"SELECT {POSTGRES.wire(CursorType.TIMESTAMPTZ, 'now()')} AS read_at, "
    f"{POSTGRES.wire(CursorType.TIMESTAMPTZ, 'caps.oldest')} AS oldest, caps.holder AS holder, "
    f"caps.hidden AS hidden FROM (SELECT {_TRANSACTION_CAPS}) AS caps"
)
# The most digits Spark's widest decimal keeps: decimal(38,18).
_FITS_DECIMAL_38_18 = r"^-?[0-9]{1,20}(\.[0-9]{1,18})?$"


@dataclass(frozen=True)
class OpenTransactions:
    """Other sessions' open transactions, read before the bounds query.

    Read in a statement of its own, before the bounds query takes its snapshot: a transaction
    whose rows that snapshot can't see is then either listed here or started after `read_at`, so
    a bound below both passes none of its rows. (Read in the same statement, it would come after
    the snapshot, and miss a transaction that committed in between.)
    """

    read_at: datetime  # the server's clock when they were read
    oldest_start: datetime | None  # None: no other transaction was open
    holder: str | None  # which session, for the metadata
    hidden_sessions: int  # sessions the role can't see: the cap may be incomplete

    @property
    def cap(self) -> datetime:
        """The instant the upper bound stays strictly below."""
        return self.read_at if self.oldest_start is None else min(self.read_at, self.oldest_start)


class JdbcSource:
    dialect: Dialect = POSTGRES

    def __init__(self, spark: SparkSession, table: TableSpec) -> None:
        assert isinstance(table.source, JdbcSourceSpec)
        self.spark = spark
        self.table = table
        self.source: JdbcSourceSpec = table.source
        self.relation = f"({table.query}) AS q" if table.query is not None else str(table.table)
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
                self._schema = selected(
                    self.table, reader.option("dbtable", self.relation).load().schema
                )
        return self._schema

    def count_rows(self) -> int:
        return int(
            self._query(f"SELECT count(*) AS n FROM {self.relation}", "counting the source's rows")[
                0
            ]["n"]
        )

    def primary_key(self) -> tuple[str, ...]:
        """The table's primary key columns, in key order, from PostgreSQL's catalog."""
        sql = (
            "SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indrelid = CAST({_literal_text(str(self.table.table))} AS regclass) AND i.indisprimary "
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
        capped = request.transaction_cap and request.cursor.type.is_temporal
        return self.freeze_below(request, self.open_transactions() if capped else None)

    def open_transactions(self) -> OpenTransactions:
        """Other sessions' open transactions, read in a statement of its own."""
        row = self._query(_OPEN_TRANSACTIONS, "reading the open transactions")[0]
        oldest = None if row["oldest"] is None else _instant(row["oldest"])
        return OpenTransactions(_instant(row["read_at"]), oldest, row["holder"], int(row["hidden"]))

    def freeze_below(self, request: FreezeRequest, open_: OpenTransactions | None) -> Bounds:
        """The bounds query, kept below `open_` (read before it) when the transaction cap applies."""
        row = self._query(self.bounds_sql(request, open_), "the bounds query")[0]
        partitioning = request.partitioning
        transaction = None
        if open_ is not None:
            transaction = TransactionCap(
                open_.oldest_start, open_.holder, open_.hidden_sessions, int(row["held"])
            )
        return Bounds(
            upper=decode_upper(request.cursor, row["upper"]),
            rows=int(row["n"]),
            partition_low=int(row["part_low"])
            if partitioning and row["part_low"] is not None
            else None,
            partition_high=int(row["part_high"])
            if partitioning and row["part_high"] is not None
            else None,
            null_rows=int(row["null_rows"]),
            boundary_rows=int(row["boundary_rows"] or 0),
            future_cap=decode_upper(request.cursor, row["future_cap"]),
            transaction=transaction,
        )

    def bounds_sql(self, request: FreezeRequest, open_: OpenTransactions | None) -> str:
        d = POSTGRES
        kind, timezone = request.cursor.type, request.timezone
        cursor = d.quote(request.cursor.column)
        conditions = [render_window(freeze_window(request), d)]
        if request.safety_lag is not None:
            conditions.append(f"{cursor} <= {d.now_plus(kind, -request.safety_lag, timezone)}")
        where = join_conditions(conditions)
        cap = None
        if open_ is not None:
            cap = d.cursor_time(kind, d.literal(CursorType.TIMESTAMPTZ, open_.cap), timezone)
        below_cap = "TRUE" if cap is None else f"({cursor} < {cap} OR ahead.dated)"
        # A row dated after the clock can't be a late commit's: its run reads everything and the
        # cursor stops at the cap instead (through `future_cap`), so such rows don't wait for years.
        ahead = "FALSE"
        if cap is not None:
            clock = d.cursor_time(kind, "now()", timezone)
            ahead = f"EXISTS (SELECT 1 FROM {self.relation} WHERE {where} AND {cursor} > {clock})"
        part = request.partitioning
        part_column = d.quote(part.column) if part else "NULL"
        part_type = part.type if part else CursorType.INTEGER
        window = (
            f"SELECT max({cursor}) FILTER (WHERE {below_cap}) AS m, count(*) FILTER (WHERE {below_cap}) AS n, "
            f"count(*) FILTER (WHERE NOT {below_cap}) AS held, "
            f"min({part_column}) FILTER (WHERE {below_cap}) AS pl, max({part_column}) FILTER (WHERE {below_cap}) AS ph "
            f"FROM {self.relation} WHERE {where}"
        )
        future = None
        if request.future_tolerance is not None and kind.is_temporal:
            future = d.now_plus(kind, request.future_tolerance, timezone)
        if cap is not None:
            future = cap if future is None else f"least({future}, {cap})"
        return (
            f"SELECT {d.wire(kind, 'w.m')} AS upper, w.n AS n, w.held AS held, "
            f"{d.wire(part_type, 'w.pl')} AS part_low, {d.wire(part_type, 'w.ph')} AS part_high, "
            f"(SELECT count(*) FROM {self.relation} WHERE {cursor} IS NULL) AS null_rows, "
            f"(SELECT count(*) FROM {self.relation} WHERE {cursor} = w.m) AS boundary_rows, "
            f"{'NULL' if future is None else d.wire(kind, future)} AS future_cap "
            f"FROM (SELECT {ahead} AS dated) AS ahead CROSS JOIN LATERAL ({window}) AS w"
        )

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        schema = self.schema()
        columns = [self._select(field) for field in schema.fields]
        window_sql = render_window(window, self.dialect) if window is not None else "TRUE"
        relation = f"(SELECT {', '.join(columns)} FROM {self.relation} WHERE {window_sql}) AS src"
        predicates = [self._range_sql(partitioning, r) for r in self._ranges(bounds, partitioning)]
        with failures_of(self.table, "opening the read"):
            frame = self.spark.read.jdbc(
                self.source.url, relation, predicates=predicates, properties=self._options()
            )
            return frame.select(*[self._rebuild(field) for field in schema.fields])

    def read_keys(self) -> DataFrame:
        """Every primary key in the source, for reconciling hard deletes."""
        keys = ", ".join(self.dialect.quote(c) for c in self.table.primary_key)
        relation = f"(SELECT {keys} FROM {self.relation}) AS keys"
        with failures_of(self.table, "reading the primary keys"):
            return self.spark.read.jdbc(self.source.url, relation, properties=self._options())

    def _select(self, field: T.StructField) -> str:
        column = self.dialect.quote(field.name)
        if isinstance(field.dataType, T.TimestampNTZType | T.TimestampType | T.DateType):
            epoch = (
                f"{column} - DATE '1970-01-01'"
                if isinstance(field.dataType, T.DateType)
                else f"CAST(EXTRACT(EPOCH FROM {column}) * 1000000 AS BIGINT)"
            )
            # 'infinity' has no epoch; failing a cast of a message is how plain SQL names the column.
            refuse = f"CAST('column {field.name} holds ' || CAST({column} AS TEXT) AS BIGINT)"
            return f"CASE WHEN isfinite({column}) OR {column} IS NULL THEN {epoch} ELSE {refuse} END AS {column}"
        if _is_unbounded_numeric(field):
            return f"CAST({column} AS TEXT) AS {column}"
        return column

    def _rebuild(self, field: T.StructField) -> Column:
        column = F.col(f"`{field.name}`")
        if isinstance(field.dataType, T.TimestampNTZType):
            # Pure arithmetic on wall-clock values: no time zone is consulted.
            epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
            return F.timestamp_add("MICROSECOND", column, epoch).alias(field.name)
        if isinstance(field.dataType, T.TimestampType):
            return F.timestamp_micros(column).alias(field.name)
        if isinstance(field.dataType, T.DateType):
            return F.date_from_unix_date(column).alias(field.name)
        if _is_unbounded_numeric(field):
            message = F.concat(
                F.lit(f"column '{field.name}' of table '{self.table.name}' holds "),
                column,
                F.lit(
                    ", which needs more digits than decimal(38,18) keeps. Fix: declare the column "
                    "numeric(p,s) with p <= 38, or cast it in `query:` (to text to keep every digit)"
                ),
            )
            fits = column.isNull() | column.rlike(_FITS_DECIMAL_38_18)
            return (
                F.when(fits, column.cast(field.dataType))
                .otherwise(F.raise_error(message))
                .alias(field.name)
            )
        return column

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


def _is_unbounded_numeric(field: T.StructField) -> bool:
    """PostgreSQL `numeric` without (p,s): Spark reports decimal(38,18) with a driver scale of 0."""
    metadata = field.metadata or {}
    return (
        isinstance(field.dataType, T.DecimalType)
        and metadata.get("jdbcClientType") == "numeric"
        and (field.dataType.precision, field.dataType.scale) == (38, 18)
        and metadata.get("scale") == 0
    )


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


def _instant(epoch_micros: str) -> datetime:
    return EPOCH_UTC + timedelta(microseconds=int(epoch_micros))


def _literal_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
