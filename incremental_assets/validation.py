"""`incremental-assets validate --connect`: each table checked against its source as it is now.

Without a JVM: a database over the plain DB-API connection the probes use (`Database.connect`),
a files source by listing its files as Spark would read them (and, for Parquet, the newest file's
footer). What is checked: the source answers, the table (or folder) is there, every column the
table names exists (a name that isn't comes with the nearest real one), and the cursor's type is
one a run can use. The last checks are the run's own (`sources/base.py`), on the columns as
Spark would read them, so they fail here in the words a run would fail in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import psycopg
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incremental_assets.config import FilesSourceSpec, Project, TableSpec
from incremental_assets.cursor import CursorType
from incremental_assets.errors import ConfigError, TableProblem, nearest
from incremental_assets.lake.files import arrow_uri
from incremental_assets.sources import database_of
from incremental_assets.sources.base import check_columns, resolve_cursor, selected
from incremental_assets.sources.binlog import server_lacks as binlog_lacks
from incremental_assets.sources.database import Connection, Database, described
from incremental_assets.sources.failures import source_error
from incremental_assets.sources.freeze_sql import relation_of
from incremental_assets.sources.listing import source_files
from incremental_assets.sources.pg_slot import names_of, server_lacks, slot_state
from incremental_assets.spark_api import T


# The Spark type a column of each cursor type arrives as (`sources/base.py` maps them back).
@cache
def _arrives_as_kind() -> dict[CursorType, T.DataType]:
    return {
        CursorType.INTEGER: T.LongType(),
        CursorType.DATE: T.DateType(),
        CursorType.TIMESTAMP: T.TimestampNTZType(),
        CursorType.TIMESTAMPTZ: T.TimestampType(),
    }


@dataclass(frozen=True)
class SourceCheck:
    """What checking one table's source found: what it saw when all is well, else the problems."""

    table: str
    seen: str
    problems: tuple[TableProblem, ...] = ()

    def line(self) -> str:
        """One line: the table and what it saw, or its problems in the words a run would use."""
        if not self.problems:
            return f"Table '{self.table}': ok ({self.seen})"
        return " ".join(problem.render() for problem in self.problems)


def check_sources(project: Project) -> list[SourceCheck]:
    """Every table's source, in the configuration's order; one connection per database source."""
    connections: dict[str, Connection | BaseException] = {}
    try:
        return [_checked(table, connections) for table in project.tables]
    finally:
        for conn in connections.values():
            if not isinstance(conn, BaseException):
                conn.close()


def _checked(table: TableSpec, connections: dict[str, Connection | BaseException]) -> SourceCheck:
    source = table.source
    if isinstance(source, FilesSourceSpec):
        return _files_check(table, source)
    database = database_of(source)
    if source.name not in connections:
        unreachable: tuple[type[BaseException], ...] = (*database.driver_errors, OSError)
        try:
            connections[source.name] = database.connect(source)
        except unreachable as exc:
            connections[source.name] = exc
    conn = connections[source.name]
    if isinstance(conn, BaseException):
        return _failed(table, source_error(table, conn, "connecting to the source").problem)
    return _database_check(table, database, conn)


def _database_check(table: TableSpec, database: Database, conn: Connection) -> SourceCheck:
    try:
        columns = described(conn, relation_of(table))
    except database.driver_errors as exc:
        return _failed(table, source_error(table, exc, "reading its columns").problem)
    schema = T.StructType(
        [T.StructField(str(c[0]), _arrives_as(database, c[1], c[4], c[5])) for c in columns]
    )
    checked = _columns_check(table, table.source_object, schema)
    if table.capture != "log" or checked.problems:
        return checked
    return _log_check(table, checked, conn)


def _log_check(table: TableSpec, checked: SourceCheck, conn: Connection) -> SourceCheck:
    """What the server lacks for log capture, and the state of the table's slot."""
    if not isinstance(conn, psycopg.Connection):  # MySQL or MariaDB: their binary log
        lacking = binlog_lacks(conn)
        if not lacking:
            return replace(checked, seen=f"{checked.seen}, log: the binary log (ROW, FULL)")
    else:
        lacking = server_lacks(conn)
    if lacking:
        problem = TableProblem(
            table.name,
            "the source can't keep a log of its changes: " + "; ".join(lacking) + ".",
            "capture",
            "change what is named, or capture the table with a `cursor:`.",
        )
        return SourceCheck(table.name, checked.seen, (problem,))
    assert isinstance(conn, psycopg.Connection)
    slot = names_of(table).slot
    state = slot_state(conn, slot)
    if state is None:
        return replace(checked, seen=f"{checked.seen}, log: slot {slot} made by the first run")
    kept = f"{(state.retained_bytes or 0) / 2**20:.1f} MB kept"
    return replace(checked, seen=f"{checked.seen}, log: slot {slot} ({state.wal_status}, {kept})")


def _files_check(table: TableSpec, source: FilesSourceSpec) -> SourceCheck:
    where = f"{source.path.rstrip('/')}/{(table.table or '').lstrip('/')}"
    try:
        files = source_files(source, table.table or "")
    except OSError as exc:
        return _failed(table, source_error(table, exc, f"listing {where}").problem)
    if not files:
        folder = nearest(table.table or "", _folder_names(source))
        hint = f"; did you mean `{folder}`?" if folder else "."
        return _failed(
            table,
            TableProblem(
                table.name,
                f"there are no {source.format} files at {where}{hint}",
                "table",
                f"name a folder, a file or a glob under the source's path ({source.path}).",
            ),
        )
    seen = f"{len(files)} file{'s' if len(files) > 1 else ''} at {where}"
    if source.format != "parquet":  # a csv or json file's columns are Spark's to read
        return SourceCheck(table.name, f"{seen}; columns not checked: Spark reads {source.format}")
    newest = max(files, key=lambda info: info.mtime_ns or 0)
    filesystem, _ = pafs.FileSystem.from_uri(arrow_uri(source.path))
    try:
        footer = pq.read_schema(newest.path, filesystem=filesystem)
    except (OSError, ValueError) as exc:  # not Parquet, or unreadable
        return _failed(table, source_error(table, exc, f"reading {newest.path}").problem)
    # Imported here: pyspark's Arrow conversions load pandas, and only a files source needs them.
    from pyspark.sql.pandas.types import from_arrow_type

    schema = T.StructType(
        [T.StructField(f.name, from_arrow_type(f.type, prefer_timestamp_ntz=True)) for f in footer]
    )
    return _columns_check(table, seen, schema)


def _folder_names(source: FilesSourceSpec) -> list[str]:
    """What the source's folder holds, by name (nothing when it isn't there)."""
    filesystem, root = pafs.FileSystem.from_uri(arrow_uri(source.path))
    listing = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    return [info.base_name for info in listing]


def _columns_check(table: TableSpec, seen: str, schema: T.StructType) -> SourceCheck:
    """The columns the table names are there, then the run's own checks of its schema."""
    missing = tuple(_missing(table, schema.fieldNames()))
    if missing:
        return SourceCheck(table.name, seen, missing)
    try:
        narrowed = selected(table, schema)
        check_columns(table, narrowed)
        cursor = resolve_cursor(table, narrowed)
    except ConfigError as exc:
        assert exc.problem is not None  # the run's checks say which table and setting
        return _failed(table, exc.problem)
    if cursor is not None:
        seen += f", cursor {cursor.column} ({cursor.type.value})"
    if table.primary_key:
        seen += f", key {', '.join(table.primary_key)}"
    return SourceCheck(table.name, seen)


def _missing(table: TableSpec, names: list[str]) -> Iterator[TableProblem]:
    """A problem per column the table names that the source doesn't have, with the nearest name."""
    named = [
        *([("cursor", table.cursor.column)] if table.cursor else []),
        *(("primary_key", column) for column in table.primary_key),
        *([("delete_column", table.delete_column)] if table.delete_column else []),
        *(("columns", column) for column in table.columns or ()),
        *(("exclude_columns", column) for column in table.exclude_columns),
    ]
    for setting, column in named:
        if column in names:
            continue
        close = nearest(column, names)
        hint = f"; did you mean `{close}`?" if close else f" (columns: {', '.join(names)})."
        message = f"column '{column}' is not in {table.source_object}{hint}"
        yield TableProblem(table.name, message, setting, "correct the column name.")


def _failed(table: TableSpec, problem: TableProblem | None) -> SourceCheck:
    assert problem is not None  # source_error always says what failed
    return SourceCheck(table.name, "", (problem,))


def _arrives_as(
    database: Database, type_code: Any, precision: int | None = None, scale: int | None = None
) -> T.DataType:
    """The Spark type a column of this DB-API type arrives as, as far as the cursor checks go:
    the five exact kinds, the types no cursor can be (floats, booleans, binary, arrays), and
    text for the rest, as `Database.cursor_type` takes them."""
    kind = database.cursor_type(type_code)
    if kind is CursorType.DECIMAL:
        return T.DecimalType(min(precision or 38, 38), scale or 0)
    if kind is not CursorType.STRING:
        return _arrives_as_kind()[kind]
    if database.name != "postgres":
        return _mysql_others().get(type_code, T.StringType())
    from psycopg.postgres import types

    info = types.get(type_code)
    if info is not None and info.array_oid == type_code:
        return T.ArrayType(_arrives_as(database, info.oid))
    return _postgres_others().get(info.name if info else "", T.StringType())


# What Spark's PostgreSQL reader makes of the types that aren't a cursor kind, nor text.
@cache
def _postgres_others() -> dict[str, T.DataType]:
    return {
        "bool": T.BooleanType(),
        "float4": T.FloatType(),
        "float8": T.DoubleType(),
        "bytea": T.BinaryType(),
        "bit": T.BinaryType(),
        "varbit": T.BinaryType(),
    }


@cache
def _mysql_others() -> dict[int, T.DataType]:
    """What the MySQL reader makes of the types that aren't a cursor kind, nor text (`mysql.py`).

    A BLOB and a TEXT column share one DB-API type code: both count as text here.
    """
    from pymysql.constants import FIELD_TYPE

    return {
        FIELD_TYPE.FLOAT: T.FloatType(),
        FIELD_TYPE.DOUBLE: T.DoubleType(),
        FIELD_TYPE.YEAR: T.IntegerType(),
        FIELD_TYPE.BIT: T.LongType(),
        FIELD_TYPE.GEOMETRY: T.BinaryType(),
    }
