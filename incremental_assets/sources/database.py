"""What a JDBC source's database contributes: its dialect, its own SQL, how its values travel.

The Spark JDBC reader (`jdbc.py`), the sensors' probes and a run's check for nothing new are the
same for every database; each database (`postgres.py`, `mysql.py`) says how to read its open
transactions and its primary key, how to open a plain DB-API connection (no JVM), and which
columns can't travel through the JDBC driver exactly and so travel in a neutral form (epoch
numbers, text) that Spark rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType
from incremental_assets.dialects import SourceDialect
from incremental_assets.sources.transactions import OpenTransactions
from incremental_assets.spark_api import T

if TYPE_CHECKING:
    from pyspark.sql import Column

APPLICATION_NAME = "incremental_assets"


class Connection(Protocol):
    """The part of a DB-API connection the probes use."""

    def cursor(self) -> Any: ...

    def close(self) -> None: ...


# Runs one statement and returns its one row: over Spark's JDBC reader, or a plain connection.
Query = Callable[[str], Mapping[str, Any]]


class Database(Protocol):
    name: str

    @property
    def dialect(self) -> SourceDialect: ...

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        """DB-API errors of its driver, to catch where a source may be unreachable from here."""
        ...

    # Connection settings its sessions are pinned with (lower-cased): a source may not set them.
    pinned_settings: tuple[str, ...]

    def spark_url(self, source: JdbcSourceSpec) -> str:
        """The URL Spark's JDBC reader gets: Spark picks its SQL dialect by the URL's prefix."""
        ...

    def spark_options(self, source: JdbcSourceSpec) -> dict[str, str]:
        """Connection options for Spark's JDBC reader: the session's name and pinned settings."""
        ...

    def connect(self, source: JdbcSourceSpec) -> Connection:
        """A plain autocommit connection, its settings pinned as the JDBC reader's are."""
        ...

    def check_session(self, table: TableSpec, run: Query) -> None:
        """Refuse what the session can't do for this table (before the bounds query)."""
        ...

    def read_open_transactions(self, run: Query) -> OpenTransactions:
        """Other sessions' open transactions, read with `run` (before the bounds query)."""
        ...

    def primary_key_sql(self, table: TableSpec) -> str: ...

    def table_changes_sql(self, table: TableSpec) -> str:
        """A value (`changes`) that changes when the table's rows do: for tables without a cursor.

        `settled` is false while more changes could still leave `changes` as it is (a marker
        that counts whole seconds, in the second it names); no run is asked for until it is true.
        `unrecorded` is true for a relation the database keeps no such value for (a view); every
        column is NULL for a table the catalog doesn't list.
        """
        ...

    def cursor_type(self, type_code: Any) -> CursorType:
        """The cursor type of a column, from its DB-API type code (any other compares as text)."""
        ...

    def fingerprint_sql(self, relation: str, where: str, columns: list[str]) -> str:
        """Rows matching `where` (`n`), and a digest of them that doesn't depend on their order."""
        ...

    def arriving(self, field: T.StructField) -> T.StructField:
        """The column as the lake gets it (the driver's type, unless it travels as text)."""
        ...

    def transport(self, table: TableSpec, field: T.StructField) -> str | None:
        """SQL for a column that can't travel as the driver reads it, else None."""
        ...

    def rebuild(self, table: TableSpec, field: T.StructField, value: Column) -> Column:
        """The column's exact value from what `transport` sent."""
        ...

    def check_schema(self, table: TableSpec, schema: T.StructType) -> None:
        """Refuse columns that can't be read exactly, naming them and the fix."""
        ...

    def weight(self, field: T.StructField) -> str | None:
        """SQL for a key column's weight, equal for values the database holds equal, else None.

        None where the database compares the column's values as the lake does (byte for byte).
        """
        ...

    def collation(self, field: T.StructField) -> str | None:
        """SQL naming the collation `weight` weighs the column's values by."""
        ...


def with_parameters(url: str, parameters: Mapping[str, str]) -> str:
    """`url` with driver properties added to its query string, the URL's own values kept.

    Properties in the URL reach the driver however Spark is run: Spark Connect lower-cases the
    names of reader options, and pgjdbc and Connector/J read property names case-sensitively.
    """
    _, _, query = url.partition("?")
    given = {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    added = {k: v for k, v in parameters.items() if k not in given}
    if not added:
        return url
    return f"{url}{'&' if query else '?'}{urlencode(added, safe=':')}"


def fetch_rows(conn: Connection, sql: str) -> list[dict[str, Any]]:
    """The rows `sql` returns, by column name."""
    cursor = conn.cursor()
    try:
        cursor.execute(sql)
        names = [column[0] for column in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        cursor.close()


def fetch_row(conn: Connection, sql: str) -> dict[str, Any]:
    """The one row `sql` returns, by column name (NULLs where it returns none)."""
    cursor = conn.cursor()
    try:
        cursor.execute(sql)
        names = [column[0] for column in cursor.description or []]
        row = cursor.fetchone()
    finally:
        cursor.close()
    if row is None:  # a catalog query about a table the database doesn't have
        return dict.fromkeys(names)
    return dict(zip(names, row, strict=True))


def described(conn: Connection, relation: str) -> list[tuple[Any, ...]]:
    """The DB-API description of `relation`'s columns: name, type code, sizes, precision, scale."""
    cursor = conn.cursor()
    try:
        cursor.execute(f"SELECT * FROM {relation} WHERE 1 = 0")
        return [tuple(column) for column in cursor.description or []]
    finally:
        cursor.close()
