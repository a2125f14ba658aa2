"""MySQL and MariaDB as a source: open InnoDB transactions, the catalog, exact values.

* Sessions (the JDBC reader's and the probes') are pinned to `time_zone = '+00:00'`, so a
  TIMESTAMP reads as its instant and the server's clock is UTC_TIMESTAMP(6), and drop the SQL
  mode PAD_CHAR_TO_FULL_LENGTH (CHAR reads unpadded) if the server sets it.
* Open transactions come from `information_schema.innodb_trx`: the oldest `trx_started` of the
  other sessions' transactions that may write (read-only ones, such as this loader's own reads,
  can't). It is kept in the server's system time zone and to the second; it is converted to an
  instant, truncated and taken a second earlier, which only holds the bound earlier (in the hour
  a daylight-saving change repeats, the local time is ambiguous: run the server in UTC, or set a
  `lookback` of an hour). A user without the PROCESS
  privilege can't see them, and a read-only server (a replica) doesn't see its primary's: the
  run then needs a `lookback`, or refuses.
* DATETIME, TIMESTAMP and DATE travel as epoch numbers (as text), DECIMAL with more than 38
  digits as text; a zero date ('0000-00-00', or a zero month or day), which has no value in any
  reader, is refused naming the column. TINYINT(1) is a number, not a boolean (the driver is
  asked not to read it as a bit); TIME travels as text, YEAR and BIT as numbers, CHAR, ENUM and
  SET unpadded.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType
from incremental_assets.dialects import MYSQL, sql_string
from incremental_assets.errors import ConfigError, TableProblem
from incremental_assets.sources.database import APPLICATION_NAME, Query, with_parameters
from incremental_assets.sources.mysql_client import SESSION_SETUP, connect
from incremental_assets.sources.transactions import OpenTransactions, instant
from incremental_assets.sources.transport import decimal_fits, from_epoch
from incremental_assets.spark_api import F, T

if TYPE_CHECKING:
    import pymysql
    from pyspark.sql import Column

_ZERO = "zero date"
_WRITERS = (
    "FROM information_schema.innodb_trx t WHERE t.trx_mysql_thread_id <> CONNECTION_ID() "
    "AND t.trx_is_read_only = 0"
)
_GRANTEE = (
    "CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', "
    "SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')"
)
_VISIBILITY = (
    "SELECT EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE "
    f"PRIVILEGE_TYPE IN ('PROCESS', 'SUPER') AND GRANTEE = {_GRANTEE}) AS sees, "
    f"@@global.read_only AS read_only, {MYSQL.wire(CursorType.TIMESTAMPTZ, MYSQL.clock)} AS read_at"
)
# A statement's NOW() is taken before InnoDB starts its transaction: a second earlier covers it.
_STARTED = "(CONVERT_TZ(t.trx_started, 'SYSTEM', '+00:00') - INTERVAL 1 SECOND)"
# information_schema.innodb_trx is a copy InnoDB refreshes at most every 0.1 s: a transaction
# begun since may be missing from it, so the read counts as a second older than the clock.
READ_MARGIN_SECONDS = 1
_READ_AT = f"({MYSQL.clock} - INTERVAL {READ_MARGIN_SECONDS} SECOND)"
_OPEN_TRANSACTIONS = (
    f"SELECT {MYSQL.wire(CursorType.TIMESTAMPTZ, _READ_AT)} AS read_at, "
    f"{MYSQL.wire(CursorType.TIMESTAMPTZ, f'MIN({_STARTED})')} AS oldest, "
    f"(SELECT CONCAT('thread ', t.trx_mysql_thread_id, ', open since ', t.trx_started) {_WRITERS} "
    f"ORDER BY t.trx_started LIMIT 1) AS holder {_WRITERS}"
)


@cache
def _cursor_type_codes() -> dict[int, CursorType]:
    from pymysql.constants import FIELD_TYPE

    return {
        FIELD_TYPE.TINY: CursorType.INTEGER,
        FIELD_TYPE.SHORT: CursorType.INTEGER,
        FIELD_TYPE.INT24: CursorType.INTEGER,
        FIELD_TYPE.LONG: CursorType.INTEGER,
        FIELD_TYPE.LONGLONG: CursorType.INTEGER,
        FIELD_TYPE.DECIMAL: CursorType.DECIMAL,
        FIELD_TYPE.NEWDECIMAL: CursorType.DECIMAL,
        FIELD_TYPE.DATE: CursorType.DATE,
        FIELD_TYPE.DATETIME: CursorType.TIMESTAMP,
        FIELD_TYPE.TIMESTAMP: CursorType.TIMESTAMPTZ,
    }


_NEUTRAL = frozenset({"timestamp_ntz", "timestamp", "date"})  # Spark's type names
_CHAR_MARKER = "__CHAR_VARCHAR_TYPE_STRING"


# Columns (by the driver's type name) that travel as SQL of their own and arrive as another type:
# TIME can be negative or past 24 hours; YEAR is a number, not a date; BIT is a number, not its
# digits' text; CHAR, ENUM and SET hold their values unpadded.
@cache
def _retyped() -> dict[str, tuple[str, T.DataType]]:
    return {
        "TIME": ("CAST({} AS CHAR)", T.StringType()),
        "YEAR": ("CAST({} AS SIGNED)", T.IntegerType()),
        "BIT": ("CAST({} AS SIGNED)", T.LongType()),
        "CHAR": ("CAST({} AS CHAR)", T.StringType()),
    }


class MySqlDatabase:
    name = "mysql"
    dialect = MYSQL
    pinned_settings: tuple[str, ...] = ("connectionattributes", "sessioninitstatement")

    def spark_url(self, source: JdbcSourceSpec) -> str:
        # Spark quotes names for MySQL only under jdbc:mysql; under jdbc:mariadb it would quote
        # them as "name", which MySQL reads as a string.
        url = "jdbc:mysql:" + source.url.split(":", 2)[2]
        return with_parameters(
            url,
            {
                # Connector/J 3 takes a jdbc:mysql URL only when the URL itself says so.
                "permitMysqlScheme": "true",
                "tinyInt1isBit": "false",
                "connectionAttributes": f"program_name:{APPLICATION_NAME}",
            },
        )

    def spark_options(self, source: JdbcSourceSpec) -> dict[str, str]:
        return {
            "sessionInitStatement": SESSION_SETUP,
            "preferTimestampNTZ": "true",  # DATETIME is a wall-clock value, TIMESTAMP an instant
        }

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        # PyMySQL is imported once a MySQL source is used: it imports `cryptography`, a tenth of
        # a second of every process that loads the definitions otherwise.
        import pymysql

        return (pymysql.Error,)

    def connect(self, source: JdbcSourceSpec) -> pymysql.Connection:
        return connect(source)

    def check_session(self, table: TableSpec, run: Query) -> None:
        """A named `timezone:` needs the server's time zone tables, or CONVERT_TZ gives NULL."""
        if table.timezone in ("UTC", "+00:00"):
            return
        zone = sql_string(table.timezone)
        if run(f"SELECT CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', {zone}) IS NULL AS missing")[
            "missing"
        ]:
            raise ConfigError(
                TableProblem(
                    table.name,
                    f"the MySQL server doesn't know the time zone '{table.timezone}' (its time "
                    "zone tables are empty), so the cursor's wall clock can't be compared with "
                    "its clock.",
                    "timezone",
                    "load the tables (mariadb-tzinfo-to-sql /usr/share/zoneinfo | mysql mysql, or "
                    "mysql_tzinfo_to_sql), or give `timezone:` as a fixed offset such as '+01:00', "
                    "or remove it if the cursor is a TIMESTAMP column.",
                )
            )

    def read_open_transactions(self, run: Query) -> OpenTransactions:
        seen = run(_VISIBILITY)
        blind = []
        if not seen["sees"]:
            blind.append(
                "the source's user can't see other sessions' transactions "
                "(information_schema.innodb_trx needs the PROCESS privilege)"
            )
        if int(seen["read_only"] or 0):
            blind.append(
                "the source is read-only (a replica?), where the primary's open transactions "
                "can't be seen"
            )
        if blind:
            read_at = instant(seen["read_at"])
            assert read_at is not None
            return OpenTransactions(read_at, None, None, blind_because=tuple(blind))
        row = run(_OPEN_TRANSACTIONS)
        read_at = instant(row["read_at"])
        assert read_at is not None
        oldest = instant(row["oldest"])
        return OpenTransactions(read_at, oldest, row["holder"])

    def primary_key_sql(self, table: TableSpec) -> str:
        schema, _, name = str(table.table).rpartition(".")
        return (
            "SELECT COLUMN_NAME AS name FROM information_schema.KEY_COLUMN_USAGE WHERE "
            f"{_schema_is(schema)} AND TABLE_NAME = {sql_string(name)} "
            "AND CONSTRAINT_NAME = 'PRIMARY' "
            "ORDER BY ORDINAL_POSITION"
        )

    def table_changes_sql(self, table: TableSpec) -> str:
        # InnoDB sets UPDATE_TIME at each commit that changes the table (NULL after a restart,
        # until the next change), to the second: a run asked for within that second could miss
        # a change committed later in it, which leaves UPDATE_TIME as it is.
        schema, _, name = str(table.table).rpartition(".")
        return (
            "SELECT CAST(COALESCE(UPDATE_TIME, 'unknown') AS CHAR) AS changes, "
            "UPDATE_TIME IS NULL OR UPDATE_TIME < NOW() AS settled, "
            "TABLE_TYPE <> 'BASE TABLE' AS unrecorded FROM "
            f"information_schema.TABLES WHERE {_schema_is(schema)} "
            f"AND TABLE_NAME = {sql_string(name)}"
        )

    def cursor_type(self, type_code: Any) -> CursorType:
        return _cursor_type_codes().get(type_code, CursorType.STRING)

    def fingerprint_sql(self, relation: str, where: str, columns: list[str]) -> str:
        values = (
            ", ".join(f"COALESCE(HEX(CAST({MYSQL.quote(c)} AS BINARY)), '-')" for c in columns)
            or "''"
        )
        row_hash = f"MD5(CONCAT_WS('|', {values}))"
        # A sum of each row's hash prefix doesn't depend on the order, and counts duplicates.
        return (
            "SELECT COUNT(*) AS n, "
            f"CAST(COALESCE(SUM(CONV(SUBSTRING({row_hash}, 1, 15), 16, 10)), 0) "
            f"AS CHAR) AS digest FROM (SELECT * FROM {relation} WHERE {where}) AS r"
        )

    def arriving(self, field: T.StructField) -> T.StructField:
        retyped = _retyped().get(_client_type(field))
        if retyped is None:
            return field
        # Without Spark's char(n) marker, which would pad the values to n characters.
        metadata = {k: v for k, v in (field.metadata or {}).items() if k != _CHAR_MARKER}
        return T.StructField(field.name, retyped[1], field.nullable, metadata)

    def transport(self, table: TableSpec, field: T.StructField) -> str | None:
        column = MYSQL.quote(field.name)
        retyped = _retyped().get(_client_type(field))
        if retyped is not None:
            return retyped[0].format(column)
        if field.dataType.typeName() in _NEUTRAL:
            kind = (
                CursorType.DATE if isinstance(field.dataType, T.DateType) else CursorType.TIMESTAMP
            )
            epoch = MYSQL.epoch(kind, column)
            return (
                f"CASE WHEN {column} IS NOT NULL AND {epoch} IS NULL THEN '{_ZERO}' "
                f"ELSE CAST({epoch} AS CHAR) END"
            )
        if _is_wide_decimal(field):
            return f"CAST({column} AS CHAR)"
        return None

    def rebuild(self, table: TableSpec, field: T.StructField, value: Column) -> Column:
        retyped = _retyped().get(_client_type(field))
        if retyped is not None:
            return value.cast(retyped[1])
        scalar = field.dataType
        if isinstance(scalar, T.DecimalType):
            return decimal_fits(table, field.name, scalar, value)
        message = (
            f"column '{field.name}' of table '{table.name}' holds a zero date, which has no value. "
            f"Fix: map it in `query:`, e.g. NULLIF({field.name}, '0000-00-00'), "
            "or set the server's sql_mode to NO_ZERO_DATE,NO_ZERO_IN_DATE and correct the rows"
        )
        return F.when(value == _ZERO, F.raise_error(F.lit(message))).otherwise(
            from_epoch(scalar, value.cast("bigint"))
        )

    def weight(self, field: T.StructField) -> str | None:
        """Text's weight under its collation, trailing spaces dropped where the collation pads.

        The default collations ignore case and accents, and the older ones trailing spaces too:
        'a' = 'A' = 'à ' is one key. WEIGHT_STRING keeps trailing spaces, and `c = RTRIM(c)`
        holds for every value exactly where the collation pads.
        """
        if not isinstance(field.dataType, T.StringType):
            return None
        column = MYSQL.quote(field.name)
        return f"WEIGHT_STRING(IF({column} = RTRIM({column}), RTRIM({column}), {column}))"

    def collation(self, field: T.StructField) -> str | None:
        return f"COLLATION({MYSQL.quote(field.name)})" if self.weight(field) else None

    def check_schema(self, table: TableSpec, schema: T.StructType) -> None:
        return None


def _schema_is(schema: str) -> str:
    return f"TABLE_SCHEMA = {sql_string(schema)}" if schema else "TABLE_SCHEMA = DATABASE()"


def _client_type(field: T.StructField) -> str:
    return str((field.metadata or {}).get("jdbcClientType", "")).upper()


def _is_wide_decimal(field: T.StructField) -> bool:
    """A DECIMAL Spark reports with 38 digits: it may be wider (DECIMAL(65,30)), and Spark would
    round it; as text, a value the lake's type can't hold is refused instead."""
    return isinstance(field.dataType, T.DecimalType) and field.dataType.precision == 38


MYSQL_DATABASE = MySqlDatabase()
