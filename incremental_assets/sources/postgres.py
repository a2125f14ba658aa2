"""PostgreSQL as a source: its open transactions, its catalog, and how its values travel exactly.

* Open transactions come from `pg_stat_activity`. What it can't show makes the run hold back
  further (sessions with `track_activities = off`: below their connection time), or refuse
  unless a `lookback` covers late commits (a hot standby, where the primary's transactions are
  invisible; prepared transactions, whose start PostgreSQL doesn't keep).
* `timestamp`, `timestamptz` and `date` travel as epoch numbers, because the driver turns
  wall-clock values into instants in the JVM's zone (shifting the ones that don't exist there)
  and misreads offsets with seconds (early years, local mean time); `numeric` without a declared
  precision (or with more than 38 digits) travels as text, because Spark would round it to
  decimal(38,18) (or (38,s)) silently. One-dimensional arrays of these travel element by
  element in the same forms; arrays of more dimensions are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType, format_cursor
from incremental_assets.dialects import POSTGRES, sql_string
from incremental_assets.errors import ConfigError, TableProblem
from incremental_assets.sources.database import APPLICATION_NAME, Query, with_parameters
from incremental_assets.sources.pg_client import connect
from incremental_assets.sources.transactions import OpenTransactions, instant
from incremental_assets.sources.transport import (
    decimal_fits,
    from_epoch,
    scalar_type,
)
from incremental_assets.spark_api import F, T

if TYPE_CHECKING:
    from pyspark.sql import Column

_OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
# Sessions that can hold rows back: other clients of this database, not our own read-only reads.
_CLIENTS = (
    f"{_OTHER_SESSIONS} AND backend_type = 'client backend' "
    f"AND coalesce(application_name, '') <> '{APPLICATION_NAME}'"
)
_WRITERS = f"{_CLIENTS} AND xact_start IS NOT NULL"
# track_activities = off: the session reports no transaction, though it may have one open.
_UNTRACKED = f"{_CLIENTS} AND state = 'disabled'"
_PREPARED = "FROM pg_prepared_xacts WHERE database = current_database()"


def _instant_sql(expression: str) -> str:
    return POSTGRES.wire(CursorType.TIMESTAMPTZ, expression)


OPEN_TRANSACTIONS = (
    f"SELECT {_instant_sql('now()')} AS read_at, "
    f"{_instant_sql(f'(SELECT min(xact_start) {_WRITERS})')} AS oldest, "
    "(SELECT format('pid %s (%s), open since %s', pid, "
    "coalesce(nullif(application_name, ''), usename), "
    f"xact_start) {_WRITERS} ORDER BY xact_start LIMIT 1) AS holder, "
    # Without pg_read_all_stats, other roles' sessions show no transaction start at all, nor
    # their backend_type; autovacuum workers are the ones with no role.
    f"(SELECT count(*) {_OTHER_SESSIONS} AND query = '<insufficient privilege>' "
    "AND usesysid IS NOT NULL) AS hidden, "
    f"(SELECT count(*) {_UNTRACKED}) AS untracked, "
    f"{_instant_sql(f'(SELECT min(backend_start) {_UNTRACKED})')} AS untracked_since, "
    f"(SELECT count(*) {_PREPARED}) AS prepared, "
    f"{_instant_sql(f'(SELECT min(prepared) {_PREPARED})')} AS prepared_since, "
    "pg_is_in_recovery() AS standby"
)


# Type OIDs of the columns that can be cursors.
_CURSOR_TYPE_OIDS = {
    20: CursorType.INTEGER,
    21: CursorType.INTEGER,
    23: CursorType.INTEGER,
    1700: CursorType.DECIMAL,
    1082: CursorType.DATE,
    1114: CursorType.TIMESTAMP,
    1184: CursorType.TIMESTAMPTZ,
}


class PostgresDatabase:
    name = "postgres"
    dialect = POSTGRES
    driver_errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    pinned_settings: tuple[str, ...] = ("applicationname",)

    def spark_url(self, source: JdbcSourceSpec) -> str:
        return with_parameters(source.url, {"ApplicationName": APPLICATION_NAME})

    def spark_options(self, source: JdbcSourceSpec) -> dict[str, str]:
        return {"preferTimestampNTZ": "true"}

    def connect(self, source: JdbcSourceSpec) -> psycopg.Connection:
        return connect(source, pinned=True)

    def check_session(self, table: TableSpec, run: Query) -> None:
        return None

    def read_open_transactions(self, run: Query) -> OpenTransactions:
        row = run(OPEN_TRANSACTIONS)
        read_at = instant(row["read_at"])
        assert read_at is not None
        held, blind = [], []
        untracked_since = instant(row["untracked_since"])
        if row["untracked"]:
            since = format_cursor(CursorType.TIMESTAMPTZ, untracked_since)  # type: ignore[arg-type]
            held.append(
                f"{row['untracked']} sessions report no transactions (track_activities = off), "
                f"so the cursor was held below the earliest of their connections ({since}). Fix: "
                "turn track_activities on for the writers' sessions, or end the idle ones."
            )
        if row["standby"]:
            blind.append(
                "the source is a hot standby (pg_is_in_recovery()), where the primary's open "
                "transactions can't be seen"
            )
        if row["prepared"]:
            since = format_cursor(CursorType.TIMESTAMPTZ, instant(row["prepared_since"]))  # type: ignore[arg-type]
            blind.append(
                f"{row['prepared']} prepared transactions are open (pg_prepared_xacts, the oldest "
                f"prepared at {since}), and PostgreSQL doesn't keep when they began"
            )
        return OpenTransactions(
            read_at=read_at,
            oldest_start=instant(row["oldest"]),
            holder=row["holder"],
            hidden_sessions=int(row["hidden"]),
            hold_below=untracked_since,
            held_because=tuple(held),
            blind_because=tuple(blind),
        )

    def primary_key_sql(self, table: TableSpec) -> str:
        return (
            "SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            f"WHERE i.indrelid = CAST({sql_string(str(table.table))} AS regclass) "
            "AND i.indisprimary "
            "ORDER BY array_position(CAST(i.indkey AS int2[]), a.attnum)"
        )

    def table_changes_sql(self, table: TableSpec) -> str:
        # Views and partitioned tables (whose rows are counted in their partitions) have no row.
        return (
            "SELECT s.n_tup_ins + s.n_tup_upd + s.n_tup_del AS changes, TRUE AS settled, "
            "s.relid IS NULL AS unrecorded "
            f"FROM (SELECT CAST({sql_string(str(table.table))} AS regclass) AS oid) AS r "
            "LEFT JOIN pg_stat_user_tables AS s ON s.relid = r.oid"
        )

    def cursor_type(self, type_code: Any) -> CursorType:
        return _CURSOR_TYPE_OIDS.get(type_code, CursorType.STRING)

    def fingerprint_sql(self, relation: str, where: str, columns: list[str]) -> str:
        rows = (
            f"SELECT md5(CAST(r AS text)) AS h FROM (SELECT * FROM {relation} WHERE {where}) AS r"
        )
        return (
            "SELECT count(*) AS n, md5(coalesce(string_agg(h, '' ORDER BY h), '')) AS digest "
            f"FROM ({rows}) AS hashed"
        )

    def arriving(self, field: T.StructField) -> T.StructField:
        return field

    def transport(self, table: TableSpec, field: T.StructField) -> str | None:
        column = POSTGRES.quote(field.name)
        scalar, dimensions = scalar_type(field.dataType)
        if not _travels_neutral(field, scalar):
            return None
        if dimensions == 0:
            return _neutral_sql(field, scalar, column)
        element = _neutral_sql(field, scalar, "_e.v")
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
            "END"
        )

    def rebuild(self, table: TableSpec, field: T.StructField, value: Column) -> Column:
        scalar, dimensions = scalar_type(field.dataType)

        def one(element: Column) -> Column:
            if isinstance(scalar, T.DecimalType):
                return decimal_fits(table, field.name, scalar, element)
            return from_epoch(scalar, element)

        return one(value) if dimensions == 0 else F.transform(value, one)

    def weight(self, field: T.StructField) -> str | None:
        return None

    def collation(self, field: T.StructField) -> str | None:
        return None

    def check_schema(self, table: TableSpec, schema: T.StructType) -> None:
        """Arrays of more than one dimension of the types that travel in a neutral form."""
        for field in schema.fields:
            scalar, dimensions = scalar_type(field.dataType)
            if dimensions > 1 and _travels_neutral(field, scalar):
                raise ConfigError(
                    TableProblem(
                        table.name,
                        f"column '{field.name}' is a {dimensions}-dimensional array of "
                        f"{scalar.simpleString()}, which can't be read exactly.",
                        fix=f"cast it in `query:` (CAST({field.name} AS text)), or select the "
                        "elements you need.",
                    )
                )


def _travels_neutral(field: T.StructField, scalar: T.DataType) -> bool:
    """Whether the column (or its elements) travels as epoch numbers or as text."""
    return isinstance(scalar, T.TimestampNTZType | T.TimestampType | T.DateType) or (
        _is_wide_numeric(field, scalar)
    )


def _is_wide_numeric(field: T.StructField, scalar: T.DataType) -> bool:
    """A `numeric` Spark may round: without (p,s) it reports decimal(38,18), above 38 digits
    (38,s)."""
    return (
        isinstance(scalar, T.DecimalType)
        and scalar.precision == 38
        and (field.metadata or {}).get("jdbcClientType") in ("numeric", "_numeric")
    )


def _neutral_sql(field: T.StructField, scalar: T.DataType, value: str) -> str:
    """A value as epoch micros (timestamps; a time of day on 1970-01-01, in UTC for `timetz`),
    epoch days (dates) or text (numerics)."""
    name = field.name
    if isinstance(scalar, T.DecimalType):
        return f"CAST({value} AS TEXT)"
    kind = CursorType.DATE if isinstance(scalar, T.DateType) else CursorType.TIMESTAMPTZ
    epoch = POSTGRES.epoch(kind, value)
    if is_time_of_day(field):  # never infinite, and isfinite() takes no `timetz`
        return epoch
    # 'infinity' has no epoch number.
    refuse = _refusal(f"{sql_string(f'column {name} holds ')} || CAST({value} AS TEXT)")
    return f"CASE WHEN isfinite({value}) OR {value} IS NULL THEN {epoch} ELSE {refuse} END"


def is_time_of_day(field: T.StructField) -> bool:
    """A `time` or `timetz` column (or an array of them), which Spark reads as a timestamp on
    1970-01-01."""
    return (field.metadata or {}).get("jdbcClientType", "").lstrip("_") in ("time", "timetz")


def _refusal(message: str) -> str:
    """Fails when evaluated: casting the message to a number is how plain SQL raises it.

    The message must depend on a column, or the planner evaluates it ahead of time.
    """
    return f"CAST({message} AS BIGINT)"


POSTGRES_DATABASE = PostgresDatabase()
