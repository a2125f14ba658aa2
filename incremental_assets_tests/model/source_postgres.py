"""The example's table in PostgreSQL, written through psycopg.

Rows without a key are found by ctid. Time cursors are stamped with `statement_timestamp()`, or
`now()` (the transaction's start) inside a late writer, whose start is what the cap keeps the
cursor below.

Besides the shared value columns, every table holds the shapes PostgreSQL sends over JDBC that
aren't scalars (`SHAPES`): arrays of text and of timestamptz (one dimension; the latter travel
element by element as epoch numbers), a two-dimensional integer array (a list of lists), a
composite value (its text form in the lake) and an array of composites (a list of their text
forms). Each write gives them new values, among them NULL, empty arrays and NULL elements. Maps
and arrays of structs can't come from PostgreSQL: Spark's JDBC reader has no map type, and
reads an array of composites as strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.rows import dict_row

from incremental_assets_tests.model.lake import COMPOSITE, arrow_type
from incremental_assets_tests.model.source import Clock, Key, LateWriter, Row, SourceTable
from incremental_assets_tests.model.table import CURSOR, DELETED, TABLE, CursorValue, TableConfig
from incremental_assets_tests.support.postgres import PostgresServer, fresh_schema


def _tags(n: int) -> str | None:
    """text[]: NULL, empty, or words with a NULL element and one a reader must quote."""
    if n % 5 == 0:
        return None
    return "{}" if n % 5 == 1 else f'{{"t{n}",NULL,"b c"}}'


def _stamps(n: int) -> str | None:
    """timestamptz[]: instants down to the microsecond, the earliest one a lake can hold."""
    if n % 6 == 0:
        return None
    if n % 6 == 3:
        return '{"0001-01-01 00:00:00.000001+00",NULL}'
    return f'{{"2024-02-29 23:59:59.{n % 1_000_000:06d}+00","2025-03-30 01:{n % 60:02d}:00+00"}}'


def _grid(n: int) -> str | None:
    """integer[][]: a 2x2 array with a NULL, or empty."""
    if n % 4 == 0:
        return None
    return "{}" if n % 4 == 1 else f"{{{{{n},{n + 1}}},{{NULL,{-n}}}}}"


def _pair(n: int) -> str | None:
    """A composite value: fields that its text form quotes, or leaves empty (NULL)."""
    if n % 3 == 0:
        return None
    return "(,)" if n % 3 == 1 else f'({n},"x {n}")'


def _pairs(n: int) -> str | None:
    """An array of composites."""
    if n % 4 == 2:
        return None
    return "{}" if n % 4 == 3 else f'{{"({n},a)","(,)"}}'


# The non-scalar columns every table holds: name -> (type, its value at the n-th write), the
# value as an array or composite literal (psycopg sends text untyped: the column's type parses it).
SHAPES: dict[str, tuple[str, Callable[[int], str | None]]] = {
    "tags": ("text[]", _tags),
    "stamps": ("timestamptz[]", _stamps),
    "grid": ("integer[][]", _grid),
    "pt": (COMPOSITE, _pair),
    "pts": (f"{COMPOSITE}[]", _pairs),
}


class PostgresTable(SourceTable):
    # format_type spellings
    WIDER: ClassVar[dict[str, str]] = {
        "smallint": "integer",
        "integer": "bigint",
        "bigint": "numeric(20,0)",
        "numeric(12,0)": "numeric(20,0)",
        "real": "double precision",
        "character varying(10)": "character varying(50)",
    }
    NARROWER: ClassVar[dict[str, str]] = {"bigint": "integer", "integer": "smallint"}
    VALUE_COLUMNS: ClassVar[dict[str, str]] = {
        "note": "varchar(10) NOT NULL",
        "qty": "integer",
        "amount": "numeric(12,0)",
        "ratio": "real",
    }
    SHAPES = SHAPES
    TYPES: ClassVar[dict[str, str]] = {  # the config's names are PostgreSQL's
        name: name
        for name in (
            *("integer", "bigint", "numeric(12,0)", "numeric(12,2)", "text", "date"),
            *("timestamp", "timestamptz"),
        )
    }
    BOOLEAN = "boolean"
    ADDED = ("text", "integer")

    def __init__(self, server: PostgresServer, schema: str, config: TableConfig) -> None:
        super().__init__(schema, config, {})
        self.server = server
        self.conn = self._connect(autocommit=True)

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
        """Types as format_type spells them, with a `[]` for each declared dimension (it spells
        `integer[][]` as `integer[]`, but Spark reads the declared dimensions)."""
        rows = self.conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) || repeat('[]', attndims - 1) "
            "FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (f"{self.schema}.{TABLE}",),
        ).fetchall()
        return {name: kind for name, kind in rows}

    def lake_type(self, kind: str) -> pa.DataType:
        return arrow_type(kind)

    def settle(self) -> None:
        return None  # the cap is the start of the oldest open transaction, or the clock itself

    def rows(self) -> list[tuple[Any, Row]]:
        """Every row; an array of composites as a list of their text forms (psycopg, which
        doesn't know the type, would give the array's text)."""
        selected = [
            sql.SQL("{} :: text[] AS {}").format(sql.Identifier(name), sql.Identifier(name))
            if kind == f"{COMPOSITE}[]"
            else sql.Identifier(name)
            for name, kind in self.columns().items()
        ]
        statement = sql.SQL("SELECT ctid::text AS __ctid, {} FROM {}").format(
            sql.SQL(", ").join(selected), sql.Identifier(TABLE)
        )
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(statement).fetchall()
        return [(r.pop("__ctid"), r) for r in rows]

    # -- writes ------------------------------------------------------------------------------

    def create(self) -> None:
        self.conn.execute(f"CREATE TYPE {COMPOSITE} AS (a integer, b text)")
        self.conn.execute(f"CREATE TABLE {TABLE} ({', '.join(self.column_types(self.config))})")

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

    def insert(self, cursor: Any, key: dict[str, Any] | None = None, conn: Any = None) -> Row:
        values = self._fresh_values(self.columns())
        if self.config.keyed:
            values = {**(key or self.new_key()), **values}
        return self._insert(conn or self.conn, values, cursor)

    def update(self, where: Key | str, cursor: Any, conn: Any = None, deleted: bool = False) -> Row:
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

    def delete(self, where: Key | str, conn: Any = None) -> None:
        condition, params = self._where(where)
        statement = sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(TABLE), condition)
        (conn or self.conn).execute(statement, params)

    def move(self, key: Key, values: dict[str, Any], conn: Any = None) -> Row:
        condition, params = self._where(key)
        statement = sql.SQL("UPDATE {} SET {} WHERE {} RETURNING *").format(
            sql.Identifier(TABLE),
            sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in values
            ),
            condition,
        )
        with (conn or self.conn).cursor(row_factory=dict_row) as cur:
            row = cur.execute(statement, [*values.values(), *params]).fetchone()
        assert row is not None, f"no row {key!r} to move"
        return row

    def truncate(self, conn: Any = None) -> None:
        (conn or self.conn).execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(TABLE)))

    def duplicate(self, ref: str, cursor: CursorValue) -> Row:
        """Copied by the database, so every value is the same (arrays and composites too)."""
        names = [sql.Identifier(name) for name in self.columns() if name != CURSOR]
        statement = sql.SQL(
            "INSERT INTO {table} ({cursor}, {names}) SELECT {value}, {names} FROM {table} "
            "WHERE ctid = %s::tid RETURNING *"
        ).format(
            table=sql.Identifier(TABLE),
            cursor=sql.Identifier(CURSOR),
            names=sql.SQL(", ").join(names),
            value=_value(cursor),
        )
        with self.conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(statement, [*_params(cursor), ref]).fetchone()
        assert row is not None
        return row

    def _where(self, where: Key | str) -> tuple[sql.Composable, list[Any]]:
        if isinstance(where, str):
            return sql.SQL("ctid = %s::tid"), [where]
        parts = [
            sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in self.config.key
        ]
        return sql.SQL(" AND ").join(parts), list(where)

    # -- other sessions ----------------------------------------------------------------------

    def open_writer(self) -> LateWriter:
        conn = self._connect(autocommit=False)
        started = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        return LateWriter(conn, started)

    def lock(self) -> Callable[[], None]:
        conn = self._connect(autocommit=False)
        conn.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")

        def release() -> None:
            conn.rollback()
            conn.close()

        return release

    def reader_waiting(self) -> bool:
        # A run's first read (Spark's schema query) is not named after the loader.
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
        return bool(row and row[0])

    # -- schema changes ----------------------------------------------------------------------

    def _add_column(self, name: str, kind: str, default: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}{default}")

    def drop_column(self, name: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN {name}")

    def retype(self, name: str, kind: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} ALTER COLUMN {name} TYPE {kind}")

    def rename(self, old: str, new: str) -> None:
        self.conn.execute(f"ALTER TABLE {TABLE} RENAME COLUMN {old} TO {new}")

    def set_primary_key(self, columns: tuple[str, ...]) -> None:
        row = self.conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            (f"{self.schema}.{TABLE}",),
        ).fetchone()
        assert row is not None, "the table has no primary key"
        self.conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ADD PRIMARY KEY ({})").format(
                sql.Identifier(TABLE),
                sql.Identifier(row[0]),
                sql.SQL(", ").join(map(sql.Identifier, columns)),
            )
        )


def _value(cursor: Any) -> sql.Composable:
    """The cursor in a statement: a placeholder, or the clock (`timestamp` cursors: UTC's wall
    clock)."""
    if not isinstance(cursor, Clock):
        return sql.Placeholder()
    clock = "now()" if cursor.in_transaction else "statement_timestamp()"
    if not cursor.with_zone:
        clock = f"({clock} AT TIME ZONE 'UTC')"
    return sql.SQL(clock)


def _params(cursor: Any) -> Sequence[Any]:
    return [] if isinstance(cursor, Clock) else [cursor]


@contextmanager
def open_postgres_table(server: PostgresServer, config: TableConfig) -> Iterator[PostgresTable]:
    with fresh_schema(server) as schema:
        table = PostgresTable(server, schema.name, config)
        table.source = schema.source()
        try:
            table.create()
            yield table
        finally:
            table.close()
