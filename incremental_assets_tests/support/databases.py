"""One source database for tests that run on PostgreSQL and on MariaDB alike.

A test writes its SQL with placeholders for what the two spell differently (`{text}`, `{tstz}`,
`{now}`, ...), and inserts rows through `insert`, so the same test body runs on both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from incremental_assets.sources.mysql import READ_MARGIN_SECONDS
from incremental_assets_tests.support.mariadb import Database, MariaDbServer
from incremental_assets_tests.support.postgres import PostgresServer, Schema

Kind = Literal["postgres", "mariadb"]
KINDS: tuple[Kind, ...] = ("postgres", "mariadb")

_SPELLINGS: dict[Kind, dict[str, str]] = {
    "postgres": {
        "text": "text",
        "key_text": "text",
        "ts": "timestamp",  # a wall clock
        "tstz": "timestamptz",  # an instant
        "tstz_default": "timestamptz NOT NULL DEFAULT now()",  # the transaction's start
        "bool": "boolean",
        "now": "clock_timestamp()",
        "day_ago": "now() - INTERVAL '1 day'",
    },
    "mariadb": {
        "text": "text",
        "key_text": "varchar(100)",
        "ts": "datetime(6)",
        "tstz": "timestamp(6) NULL",
        "tstz_default": "timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",  # the statement's
        "bool": "boolean",
        "now": "NOW(6)",  # the session is pinned to UTC
        "day_ago": "NOW(6) - INTERVAL 1 DAY",
    },
}


@dataclass
class SourceDb:
    kind: Kind
    handle: Schema | Database
    server: PostgresServer | MariaDbServer

    @property
    def name(self) -> str:
        return self.handle.name

    def sql(self, text: str) -> str:
        return text.format(**_SPELLINGS[self.kind])

    def execute(self, *statements: str) -> None:
        self.handle.execute(*[self.sql(s) for s in statements])

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.handle.query(self.sql(sql))

    def insert(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        values = ", ".join(
            "(" + ", ".join(_literal(self.kind, v) for v in row) + ")" for row in rows
        )
        self.handle.execute(f"INSERT INTO {table} VALUES {values}")

    def outlast_cap_margin(self) -> None:
        """Wait until rows written so far are below the transaction cap's read instant.

        MySQL's cap counts its read as a second older than the clock (innodb_trx is a cache),
        so a row written within that second is held back until a later run.
        """
        if self.kind == "mariadb":
            time.sleep(READ_MARGIN_SECONDS + 0.1)

    def utc(self, value: datetime) -> str:
        """A literal of the instant `value` for a `{tstz}` column."""
        text = value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
        return f"'{text}+00'" if self.kind == "postgres" else f"'{text}'"  # MariaDB's session: UTC

    def alter_type(self, table: str, column: str, type_: str) -> str:
        """The statement that changes a column's type."""
        if self.kind == "postgres":
            return f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_}"
        return f"ALTER TABLE {table} MODIFY COLUMN {column} {type_}"

    def source(self, **extra: Any) -> dict[str, Any]:
        return self.handle.source(**extra)

    def connect(self, autocommit: bool = True) -> Any:
        """A DB-API connection of the test's own (psycopg or PyMySQL)."""
        if isinstance(self.server, PostgresServer):
            return self.server.connect(autocommit=autocommit)
        return self.server.connect(self.name, autocommit=autocommit)

    def qualified(self, table: str) -> str:
        return f"{self.name}.{table}"

    @contextmanager
    def open_transaction(self, table: str) -> Iterator[None]:
        """Another session's transaction, open (it has read `table`) until the block ends."""
        if isinstance(self.server, PostgresServer):
            conn = self.server.connect(autocommit=False)
            conn.execute(f"SELECT count(*) FROM {self.qualified(table)}")
            try:
                yield
            finally:
                conn.rollback()
                conn.close()
            return
        other = self.server.connect(self.name, autocommit=False)
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(f"SELECT count(*) FROM {table}")
        try:
            yield
        finally:
            other.rollback()
            other.close()


def _literal(kind: Kind, value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if "\\" not in text:
        return "'" + text.replace("'", "''") + "'"
    # Read the same however the session takes backslashes (standard_conforming_strings,
    # NO_BACKSLASH_ESCAPES).
    if kind == "postgres":
        return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    return f"CONVERT(X'{text.encode().hex()}' USING utf8mb4)"
