"""The example's table in MariaDB (or MySQL), written through PyMySQL, in the server's default
collation (case-insensitive, trailing spaces ignored).

* Every session is pinned to `time_zone = '+00:00'`: time cursors are stamped with `NOW(6)`, the
  UTC wall clock, for DATETIME(6) (`timestamp`) and TIMESTAMP(6) (`timestamptz`) alike; the model
  reads a TIMESTAMP as the instant it is.
* Text keys and cursors are written respelled (`respell`): in upper or lower case, with 0 to 2
  trailing spaces, and an update respells the row's key. The database holds the spellings of one
  value equal, so ties, windows and keys that differ only so are what the product must get right
  (issue 15, item 4).
* Rows without a key are found by their values (compared exactly), one at a time (`LIMIT 1`):
  identical rows are interchangeable.
* A late writer is an InnoDB transaction (`START TRANSACTION WITH CONSISTENT SNAPSHOT`); the cap
  keeps the cursor below its `trx_started` in `information_schema.innodb_trx`, which is to the
  second and in the server's zone: converted to UTC and taken a second earlier, as the product
  documents (sources/mysql.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pyarrow as pa
import pymysql
from pymysql.cursors import DictCursor

from incremental_assets.sources.mysql import READ_MARGIN_SECONDS
from incremental_assets_tests.model.source import Clock, Key, LateWriter, Row, SourceTable
from incremental_assets_tests.model.table import CURSOR, DELETED, TABLE, CursorValue, TableConfig
from incremental_assets_tests.support.mariadb import MariaDbServer, fresh_database

_DISPLAY_WIDTH = re.compile(r"^(smallint|mediumint|int|bigint)\(\d+\)")
_LAKE_TYPES = {
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "bigint unsigned": pa.decimal128(20, 0),
    "float": pa.float32(),
    "double": pa.float64(),
    "text": pa.string(),
    "tinyint(1)": pa.int8(),  # BOOLEAN is a number (sources/mysql.py)
    "date": pa.date32(),
    "datetime(6)": pa.timestamp("us"),
    "timestamp(6)": pa.timestamp("us", tz="UTC"),
}


class MariaDbTable(SourceTable):
    # COLUMN_TYPE spellings, without integer display widths
    WIDER: ClassVar[dict[str, str]] = {
        "smallint": "int",
        "int": "bigint",
        "bigint": "bigint unsigned",  # a decimal(20,0) in the lake
        "decimal(12,0)": "decimal(20,0)",
        "float": "double",
        "varchar(10)": "varchar(50)",
    }
    KEY_WIDER: ClassVar[dict[str, str]] = {"bigint": "decimal(20,0)"}  # keys may be negative
    NARROWER: ClassVar[dict[str, str]] = {"bigint": "int", "int": "smallint"}
    VALUE_COLUMNS: ClassVar[dict[str, str]] = {
        "note": "varchar(10) NOT NULL",
        "qty": "int",
        "amount": "decimal(12,0)",
        "ratio": "float",
    }
    TYPES: ClassVar[dict[str, str]] = {
        "integer": "int",
        "bigint": "bigint",
        "numeric(12,0)": "decimal(12,0)",
        "numeric(12,2)": "decimal(12,2)",
        "text": "varchar(100)",
        "date": "date",
        "timestamp": "datetime(6)",
        "timestamptz": "timestamp(6)",
    }
    BOOLEAN = "boolean"
    ADDED = ("text", "int")

    def __init__(self, server: MariaDbServer, database: str, config: TableConfig) -> None:
        super().__init__(database, config, {})
        self.server = server
        self.conn = self._connect(autocommit=True)
        self.spellings = 0
        self.stamped = float("-inf")  # when the clock last stamped a cursor (time.monotonic)

    def _connect(self, autocommit: bool) -> pymysql.Connection:
        conn = self.server.connect(self.schema, autocommit=autocommit)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            # A statement of the machine's that waits this long for a lock is a bug in the
            # machine: fail, don't hang.
            cur.execute("SET innodb_lock_wait_timeout = 120, lock_wait_timeout = 120")
        return conn

    def _execute(self, statement: str, params: Any = None, conn: Any = None) -> int:
        with (conn or self.conn).cursor() as cur:
            return int(cur.execute(statement, params))

    def _select(self, statement: str, params: Any = None, conn: Any = None) -> list[Row]:
        with (conn or self.conn).cursor(DictCursor) as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())

    def close(self) -> None:
        self.conn.close()

    # -- reading -----------------------------------------------------------------------------

    def _column_facts(self) -> list[Row]:
        return self._select(
            "SELECT COLUMN_NAME AS name, COLUMN_TYPE AS kind, IS_NULLABLE AS nullable, "
            "COLUMN_DEFAULT AS dflt FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (TABLE,),
        )

    def columns(self) -> dict[str, str]:
        return {
            f["name"]: _DISPLAY_WIDTH.sub(r"\1", f["kind"].lower()) for f in self._column_facts()
        }

    def lake_type(self, kind: str) -> pa.DataType:
        if kind in _LAKE_TYPES:
            return _LAKE_TYPES[kind]
        if kind.startswith("varchar("):
            return pa.string()
        if kind.startswith("decimal("):
            precision, scale = kind[len("decimal(") : -1].split(",")
            return pa.decimal128(int(precision), int(scale))
        raise ValueError(f"no lake type known for {kind}")

    def rows(self) -> list[tuple[Row, Row]]:
        instants = self._instants()
        return [(raw, _as_seen(raw, instants)) for raw in self._select(f"SELECT * FROM {TABLE}")]

    def _instants(self) -> list[str]:
        """The TIMESTAMP columns, whose values the model holds as the UTC instants they are."""
        return [name for name, kind in self.columns().items() if kind.startswith("timestamp")]

    # -- writes ------------------------------------------------------------------------------

    def create(self) -> None:
        self._execute(f"CREATE TABLE {TABLE} ({', '.join(self.column_types(self.config))})")

    def respell(self, value: Any) -> Any:
        """Text in turn in upper and lower case, with 0, 1 or 2 trailing spaces."""
        if not isinstance(value, str):
            return value
        self.spellings += 1
        n = self.spellings
        text = value.rstrip(" ")
        return (text.upper() if n % 2 else text.lower()) + " " * (n // 2 % 3)

    def _written(self, note: str, conn: Any) -> Row:
        """The row a write left, found by its note (unique to each write), as `rows` gives it."""
        rows = self._select(f"SELECT * FROM {TABLE} WHERE BINARY note = %s", (note,), conn)
        assert len(rows) == 1, f"{len(rows)} rows hold the note {note}"
        return _as_seen(rows[0], self._instants())

    def settle(self) -> None:
        # The cap counts its read of innodb_trx as READ_MARGIN_SECONDS older than the clock:
        # a row the clock stamped within that margin is held back until a later run.
        wait = self.stamped + READ_MARGIN_SECONDS + 0.05 - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _stamp(self, cursor: Any) -> None:
        if isinstance(cursor, Clock):
            self.stamped = time.monotonic()

    def _insert(self, conn: Any, values: dict[str, Any], cursor: Any) -> None:
        self._stamp(cursor)
        names = ", ".join([CURSOR, *values])
        marks = ", ".join([_mark(cursor), *["%s"] * len(values)])
        self._execute(
            f"INSERT INTO {TABLE} ({names}) VALUES ({marks})",
            [*_params(cursor), *values.values()],
            conn,
        )

    def insert(self, cursor: Any, key: dict[str, Any] | None = None, conn: Any = None) -> Row:
        values = self._fresh_values(self.columns())
        if self.config.keyed:
            spelled = {name: self.respell(v) for name, v in (key or self.new_key()).items()}
            values = {**spelled, **values}
        self._insert(conn or self.conn, values, cursor)
        return self._written(values["note"], conn or self.conn)

    def update(self, where: Key | Row, cursor: Any, conn: Any = None, deleted: bool = False) -> Row:
        values = self._fresh_values(self.columns())
        if DELETED in values:
            values[DELETED] = deleted
        if isinstance(where, tuple):
            # The key respelled: one the database holds equal, which the lake must match.
            keys = zip(self.config.key, where, strict=True)
            values |= {c: self.respell(v) for c, v in keys if isinstance(v, str)}
        self._stamp(cursor)
        assignments = ", ".join([f"{CURSOR} = {_mark(cursor)}", *(f"{n} = %s" for n in values)])
        condition, condition_params = self._where(where)
        changed = self._execute(
            f"UPDATE {TABLE} SET {assignments} WHERE {condition}",
            [*_params(cursor), *values.values(), *condition_params],
            conn,
        )
        assert changed == 1, f"{changed} rows updated for {where!r}"
        return self._written(values["note"], conn or self.conn)

    def delete(self, where: Key | Row, conn: Any = None) -> None:
        condition, params = self._where(where)
        deleted = self._execute(f"DELETE FROM {TABLE} WHERE {condition}", params, conn)
        assert deleted == 1, f"{deleted} rows deleted for {where!r}"

    def move(self, key: Key, values: dict[str, Any], conn: Any = None) -> Row:
        """(No UPDATE ... RETURNING here: the row is read back at its new key.)"""
        condition, params = self._where(key)
        assignments = ", ".join(f"{name} = %s" for name in values)
        moved = self._execute(
            f"UPDATE {TABLE} SET {assignments} WHERE {condition}",
            [*values.values(), *params],
            conn,
        )
        assert moved == 1, f"{moved} rows moved from {key!r}"
        condition, params = self._where(tuple(values[c] for c in self.config.key))
        (row,) = self._select(f"SELECT * FROM {TABLE} WHERE {condition}", params, conn)
        return _as_seen(row, self._instants())

    def truncate(self, conn: Any = None) -> None:
        """(It commits on its own, and a transaction open in `conn` before it.)"""
        self._execute(f"TRUNCATE {TABLE}", conn=conn)

    def duplicate(self, ref: Row, cursor: CursorValue) -> Row:
        values = {name: value for name, value in ref.items() if name != CURSOR}
        self._insert(self.conn, values, cursor)
        return {CURSOR: cursor, **values}

    def _where(self, where: Key | Row) -> tuple[str, list[Any]]:
        """By key (compared as the database compares keys), or one row holding exactly these
        values."""
        if isinstance(where, tuple):
            return " AND ".join(f"{c} = %s" for c in self.config.key), list(where)
        parts, params = [], []
        for name, value in where.items():
            if value is None:
                parts.append(f"{name} IS NULL")
            else:
                parts.append(f"BINARY {name} = %s" if isinstance(value, str) else f"{name} = %s")
                params.append(value)
        return " AND ".join(parts) + " LIMIT 1", params

    # -- other sessions ----------------------------------------------------------------------

    def open_writer(self) -> LateWriter:
        conn = self._connect(autocommit=False)
        self._execute("START TRANSACTION WITH CONSISTENT SNAPSHOT", conn=conn)
        # innodb_trx is a cache InnoDB refreshes when it is older than 0.1 s: a transaction
        # that just started may not be listed yet.
        deadline = time.monotonic() + 10
        while True:
            started = self._select(
                "SELECT CONVERT_TZ(trx_started, 'SYSTEM', '+00:00') AS started "
                "FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()",
                conn=conn,
            )
            if started or time.monotonic() > deadline:
                break
            time.sleep(0.15)
        assert len(started) == 1, f"the transaction is not in innodb_trx: {started}"
        utc: datetime = started[0]["started"]
        return LateWriter(conn, utc.replace(tzinfo=UTC) - timedelta(seconds=1))

    def lock(self) -> Callable[[], None]:
        conn = self._connect(autocommit=True)
        self._execute(f"LOCK TABLES {TABLE} WRITE", conn=conn)

        def release() -> None:
            self._execute("UNLOCK TABLES", conn=conn)
            conn.close()

        return release

    def reader_waiting(self) -> bool:
        rows = self._select(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST "
            "WHERE DB = DATABASE() AND STATE LIKE 'Waiting for table%%'"
        )
        return bool(rows[0]["n"])

    # -- schema changes ----------------------------------------------------------------------

    def _add_column(self, name: str, kind: str, default: str) -> None:
        self._execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}{default}")

    def drop_column(self, name: str) -> None:
        self._execute(f"ALTER TABLE {TABLE} DROP COLUMN {name}")

    def retype(self, name: str, kind: str) -> None:
        """MODIFY restates the column: keep its NULL-ness and default."""
        facts = next(f for f in self._column_facts() if f["name"] == name)
        clause = "" if facts["nullable"] == "YES" else " NOT NULL"
        if facts["dflt"] not in (None, "NULL"):
            clause += f" DEFAULT {facts['dflt']}"
        self._execute(f"ALTER TABLE {TABLE} MODIFY COLUMN {name} {kind}{clause}")

    def rename(self, old: str, new: str) -> None:
        self._execute(f"ALTER TABLE {TABLE} RENAME COLUMN {old} TO {new}")

    def set_primary_key(self, columns: tuple[str, ...]) -> None:
        self._execute(
            f"ALTER TABLE {TABLE} DROP PRIMARY KEY, ADD PRIMARY KEY ({', '.join(columns)})"
        )


def _as_seen(raw: Row, instants: list[str]) -> Row:
    row = dict(raw)
    for name in instants:
        if row[name] is not None:
            row[name] = row[name].replace(tzinfo=UTC)
    return row


def _mark(cursor: Any) -> str:
    return "NOW(6)" if isinstance(cursor, Clock) else "%s"


def _params(cursor: Any) -> list[Any]:
    return [] if isinstance(cursor, Clock) else [cursor]


@contextmanager
def open_mariadb_table(server: MariaDbServer, config: TableConfig) -> Iterator[MariaDbTable]:
    with fresh_database(server) as database:
        table = MariaDbTable(server, database.name, config)
        table.source = database.source()
        try:
            table.create()
            yield table
        finally:
            table.close()
