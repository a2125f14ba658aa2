"""The PostgreSQL side: one real source table, written the ways applications write tables.

Every write goes through its own autocommit statement, except a `LateWriter`, whose transaction
stays open across runs and commits later. Nothing here predicts the lake: the machine reads back
what the database committed (`snapshot`) and the reference model works from that.

Cursor values: explicit types (bigint, numeric, text, date) take values from the model's frontier;
time cursors are stamped by the database clock (`statement_timestamp()`, or `now()`, the
transaction's start, inside a late writer), and a tie copies the frontier's value exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from incremental_assets_tests.model.table import (
    CURSOR,
    DELETED,
    TABLE,
    CursorValue,
    TableConfig,
    next_cursor,
)
from incremental_assets_tests.postgres import PostgresServer

Row = dict[str, Any]
Key = tuple[Any, ...]

# What a column widens to, and what it narrows to (format_type spellings).
WIDER = {
    "smallint": "integer",
    "integer": "bigint",
    "numeric(12,0)": "numeric(20,0)",
    "real": "double precision",
    "character varying(10)": "character varying(50)",
}
NARROWER = {"bigint": "integer", "integer": "smallint"}
KEY_EPOCH = datetime(2025, 3, 30, 1, 0)  # Europe/Paris skips 02:00-03:00 that night
# Value columns every table starts with; `note` is never dropped and changes on every write, so
# two versions of a row always differ in it (a keyless row's identity rests on that).
VALUE_COLUMNS = {
    "note": "varchar(10) NOT NULL",
    "qty": "integer",
    "amount": "numeric(12,0)",
    "ratio": "real",
}


@dataclass(frozen=True)
class Snapshot:
    """The committed rows, as a fresh session sees them, and the columns with their types."""

    columns: dict[str, str]
    rows: tuple[Row, ...]


@dataclass
class LateWriter:
    """A transaction held open across runs (see the README's *Late commits*)."""

    conn: psycopg.Connection
    started: datetime  # its now(): what the transaction cap keeps the cursor below
    keys: set[Key] = field(default_factory=set)  # rows it inserted or locked by updating
    explicit: list[CursorValue] = field(default_factory=list)  # values not stamped by the clock


class SourceTable:
    def __init__(self, server: PostgresServer, schema: str, config: TableConfig) -> None:
        self.server = server
        self.schema = schema
        self.config = config
        self.conn = self._connect(autocommit=True)
        self.serial = 0  # makes every written value unique
        self.next_key = 1
        self.added = 0
        self.defaulted: set[str] = set()  # columns added with a DEFAULT

    def _connect(self, autocommit: bool) -> psycopg.Connection:
        conn = self.server.connect(autocommit=autocommit)
        conn.execute(f"SET search_path TO {self.schema}")
        conn.execute("SET TIME ZONE 'UTC'")
        # A statement of the machine's that waits this long for a lock is a bug in the machine:
        # fail, don't hang.
        conn.execute("SET lock_timeout = '120s'")
        if not autocommit:
            conn.commit()
        return conn

    def close(self) -> None:
        self.conn.close()

    # -- reading -----------------------------------------------------------------------------

    def columns(self) -> dict[str, str]:
        rows = self.conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (f"{self.schema}.{TABLE}",),
        ).fetchall()
        return {name: kind for name, kind in rows}

    def snapshot(self) -> Snapshot:
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(f"SELECT * FROM {TABLE}").fetchall()
        return Snapshot(self.columns(), tuple(rows))

    def db_now(self) -> datetime:
        return self.conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]

    def key_of(self, row: Row) -> Key:
        return tuple(row[c] for c in self.config.key)

    def live_rows(self) -> list[tuple[str, Row]]:
        """(ctid, row) of every committed row, in a stable order (by key, else by cursor and note)."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(f"SELECT ctid::text AS __ctid, * FROM {TABLE}").fetchall()
        pairs = [(r.pop("__ctid"), r) for r in rows]
        if self.config.keyed:
            return sorted(pairs, key=lambda p: self.key_of(p[1]))
        return sorted(pairs, key=lambda p: (p[1][CURSOR], p[1]["note"]))

    # -- creating ----------------------------------------------------------------------------

    def create(self) -> None:
        cursor_type = self.config.cursor_type
        columns = []
        if self.config.keyed:
            columns.append(f"id {self.config.key_type} NOT NULL")
            if "k2" in self.config.key:
                columns.append("k2 integer NOT NULL")
        columns.append(f"{CURSOR} {cursor_type} NOT NULL")
        columns += [f"{name} {kind}" for name, kind in VALUE_COLUMNS.items()]
        if self.config.soft_deletes:
            columns.append(f"{DELETED} boolean NOT NULL DEFAULT false")
        if self.config.keyed:
            columns.append(f"PRIMARY KEY ({', '.join(self.config.key)})")
        self.conn.execute(f"CREATE TABLE {TABLE} ({', '.join(columns)})")

    # -- values ------------------------------------------------------------------------------

    def _key_values(self, n: int) -> dict[str, Any]:
        if "k2" in self.config.key:
            ident, k2 = n // 2 + 1, n % 2
        else:
            ident, k2 = n, None
        value: Any = ident
        if self.config.key_type == "numeric(12,0)":
            value = Decimal(ident)
        elif self.config.key_type == "text":
            value = f"k{ident:05d}"
        elif self.config.key_type == "timestamp":
            value = KEY_EPOCH + timedelta(minutes=17 * ident)  # 4, 5, 6: in the skipped hour
        values = {"id": value}
        if k2 is not None:
            values["k2"] = k2
        return values

    def new_key(self) -> dict[str, Any]:
        values = self._key_values(self.next_key)
        self.next_key += 1
        return values

    def _fresh_values(self, columns: dict[str, str]) -> dict[str, Any]:
        """New values for every value column the table has now."""
        self.serial += 1
        n = self.serial
        values: dict[str, Any] = {"note": f"n{n:06d}"}
        if "qty" in columns:
            values["qty"] = n % 1000
        if "amount" in columns:
            values["amount"] = Decimal(n * 7 % 100_000)
        if "ratio" in columns:
            values["ratio"] = (n % 64) * 0.25  # exact in real and double precision
        if DELETED in columns:
            values[DELETED] = False
        for name, kind in columns.items():
            if name.startswith("x"):
                values[name] = f"x{n}" if kind == "text" else n
        return values

    def cursor_sql(self, frontier: CursorValue | None, bump: int, in_transaction: bool) -> Any:
        """The cursor value to write: a literal, or (time cursors) an SQL expression of the clock."""
        if not self.config.time_cursor:
            return next_cursor(self.config.cursor_type, frontier, bump)
        if bump == 0 and frontier is not None:
            return frontier
        clock = "now()" if in_transaction else "statement_timestamp()"
        if self.config.cursor_type == "timestamp":
            clock = f"({clock} AT TIME ZONE 'UTC')"
        return sql.SQL(clock)

    # -- writes ------------------------------------------------------------------------------

    def _insert(self, conn: psycopg.Connection, values: dict[str, Any], cursor: Any) -> Row:
        names = [CURSOR, *values]
        placeholders: list[sql.Composable] = [_value(cursor)]
        placeholders += [sql.Placeholder()] * len(values)
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING *").format(
            sql.Identifier(TABLE),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(placeholders),
        )
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(statement, [*_params(cursor), *values.values()]).fetchone()
        assert row is not None
        return row

    def insert(
        self, cursor: Any, key: dict[str, Any] | None = None, conn: psycopg.Connection | None = None
    ) -> Row:
        """One new row (a new key unless `key` is given)."""
        values = self._fresh_values(self.columns())
        if self.config.keyed:
            values = {**(key or self.new_key()), **values}
        return self._insert(conn or self.conn, values, cursor)

    def update(
        self,
        where: Key | str,
        cursor: Any,
        conn: psycopg.Connection | None = None,
        deleted: bool = False,
    ) -> Row:
        """New values and cursor for one row (by key, or by ctid without one); sets the delete
        flag as told (an update of a soft-deleted row brings it back)."""
        values = self._fresh_values(self.columns())
        if DELETED in values:
            values[DELETED] = deleted
        assignments = [sql.SQL("{} = ").format(sql.Identifier(CURSOR)) + _value(cursor)]
        assignments += [
            sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder()) for name in values
        ]
        condition, condition_params = self._where(where)
        statement = sql.SQL("UPDATE {} SET {} WHERE {} RETURNING *").format(
            sql.Identifier(TABLE), sql.SQL(", ").join(assignments), condition
        )
        with (conn or self.conn).cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                statement, [*_params(cursor), *values.values(), *condition_params]
            ).fetchone()
        assert row is not None, f"no row {where!r} to update"
        return row

    def delete(self, where: Key | str) -> None:
        condition, params = self._where(where)
        statement = sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(TABLE), condition)
        self.conn.execute(statement, params)

    def duplicate(self, ctid: str, cursor: CursorValue) -> Row:
        """An exact copy of a row (keyless tables), with the cursor set to `cursor`."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(f"SELECT * FROM {TABLE} WHERE ctid = %s::tid", (ctid,)).fetchone()
        assert row is not None
        values = {name: value for name, value in row.items() if name != CURSOR}
        return self._insert(self.conn, values, cursor)

    def _where(self, where: Key | str) -> tuple[sql.Composable, list[Any]]:
        if isinstance(where, str):
            return sql.SQL("ctid = %s::tid"), [where]
        parts = [
            sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in self.config.key
        ]
        return sql.SQL(" AND ").join(parts), list(where)

    # -- late writers ------------------------------------------------------------------------

    def open_writer(self) -> LateWriter:
        conn = self._connect(autocommit=False)
        started = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        return LateWriter(conn, started)

    def lock(self) -> psycopg.Connection:
        """A session holding the table exclusively: readers wait until it rolls back."""
        conn = self._connect(autocommit=False)
        conn.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        return conn

    def reader_waiting(self) -> bool:
        """Whether a session (a run's read: its first, Spark's schema query, is not named after
        the loader) is waiting for a lock in this database."""
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
        return bool(row and row[0])

    # -- schema changes ----------------------------------------------------------------------

    def add_column(self, default: bool) -> str:
        self.added += 1
        name = f"x{self.added}"
        kind = "text" if self.added % 2 else "integer"
        clause = ""
        if default:
            clause = " DEFAULT 'd'" if kind == "text" else " DEFAULT 7"
            self.defaulted.add(name)
        self.conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}{clause}")
        return f"{name} {kind}{clause}"

    def drop_column(self, name: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN {name}")

    def retype(self, name: str, kind: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} ALTER COLUMN {name} TYPE {kind}")

    def rename(self, old: str, new: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} RENAME COLUMN {old} TO {new}")

    def droppable(self) -> list[str]:
        """Value columns a schema change may drop: never the key, the cursor, note or the flag."""
        keep = {*self.config.key, CURSOR, "note", DELETED}
        return [name for name in self.columns() if name not in keep]

    def widenable(self, keys: bool) -> list[tuple[str, str]]:
        key_columns = set(self.config.key)
        return [
            (name, WIDER[kind])
            for name, kind in self.columns().items()
            if kind in WIDER and (name in key_columns) == keys and name != CURSOR
        ]


def _value(cursor: Any) -> sql.Composable:
    return cursor if isinstance(cursor, sql.Composable) else sql.Placeholder()


def _params(cursor: Any) -> Sequence[Any]:
    return [] if isinstance(cursor, sql.Composable) else [cursor]


def keys_in(rows: Iterable[Row], key: Sequence[str]) -> set[Key]:
    return {tuple(row[c] for c in key) for row in rows}
