"""A table's replication slot and publication on PostgreSQL, through SQL functions over an
ordinary connection (no replication protocol, no JVM).

    publication   `ia_<table>`, FOR TABLE the source table: what pgoutput sends
    slot          `ia_<table>`, pgoutput: the log kept for the table from its first run on
    bound         `pg_current_wal_flush_lsn()`, frozen at the start of a run: the functions
                  never decode past the flush point, and return only transactions that
                  committed before the bound
    peek          `pg_logical_slot_peek_binary_changes`, up to the bound and at most `limit`
                  changes, without consuming them: the run commits to the lake first
    advance       `pg_replication_slot_advance` to the position the last run recorded, at the
                  start of every run (the log before it is no longer kept)
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from incremental_assets.config import TableSpec
from incremental_assets.cursor import format_lsn, parse_lsn
from incremental_assets.sources.pgoutput import Message, decode, python_encoding

PLUGIN = "pgoutput"
# How long creating a slot may wait for the transactions open at that moment to end.
CREATE_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class LogNames:
    """Where a table's changes are: its relation, and the slot and publication that keep them."""

    relation: tuple[str, str]
    slot: str

    @property
    def publication(self) -> str:
        return self.slot


def names_of(table: TableSpec) -> LogNames:
    """The relation `table:` names (unquoted names fold to lower case, as PostgreSQL's do), and
    the slot: `slot:`, or `ia_<schema>_<table>_<digest>`."""
    assert table.table is not None, "a `capture: log` table names its `table:` (config rules)"
    parts = [_identifier(p) for p in _split(table.table)]
    relation = (parts[0], parts[1]) if len(parts) == 2 else ("public", parts[-1])
    if table.slot is not None:
        return LogNames(relation, table.slot)
    # The digest of the exact names keeps apart tables the folding makes alike (`Items` and
    # `items`, `a_b.c` and `a.b_c`)
    digest = hashlib.sha256("\0".join(relation).encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9_]", "_", f"ia_{relation[0]}_{relation[1]}".lower())[:54]
    return LogNames(relation, f"{readable}_{digest}")


class SlotWaited(Exception):
    """Making a slot waited past its timeout for transactions open on the server to end."""

    def __init__(self, seconds: int) -> None:
        super().__init__(f"waited {seconds} s for open transactions")
        self.seconds = seconds


@dataclass(frozen=True)
class SlotState:
    plugin: str
    database: str
    wal_status: str | None  # reserved, extended, unreserved, lost
    restart_lsn: int | None
    confirmed_flush_lsn: int | None
    retained_bytes: int | None  # the WAL the slot keeps: current LSN less its restart LSN
    active: bool


def slot_state(conn: psycopg.Connection, slot: str) -> SlotState | None:
    row = conn.execute(
        "SELECT plugin, database, wal_status, restart_lsn::text, confirmed_flush_lsn::text, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, active "
        "FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    plugin, database, status, restart, confirmed, retained, active = row
    return SlotState(
        plugin=str(plugin),
        database=str(database),
        wal_status=status,
        restart_lsn=parse_lsn(restart) if restart else None,
        confirmed_flush_lsn=parse_lsn(confirmed) if confirmed else None,
        retained_bytes=int(retained) if retained is not None else None,
        active=bool(active),
    )


def ensure_publication(conn: psycopg.Connection, publication: str, table: tuple[str, str]) -> None:
    """The publication of the table's changes (inserts, updates, deletes and truncates)."""
    found = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone()
    # A partitioned table's changes come under its own name, not its partitions'
    options = sql.SQL("(publish_via_partition_root = true)")
    name, relation = sql.Identifier(publication), sql.Identifier(*table)
    if found is None:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH {}").format(name, relation, options)
        )
    else:  # the table made again, or another one renamed in its place: publish the one there now
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(name, relation))
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET {}").format(name, options))


@dataclass(frozen=True)
class TableFacts:
    """What decides whether a table's log can be read back exactly."""

    identity: str  # its replica identity: d(efault), f(ull), i(ndex), n(othing)
    identity_columns: tuple[str, ...]  # the columns an update's old key names (d, i)
    generated: tuple[str, ...]  # stored generated columns, which pgoutput leaves out
    children: bool  # inheritance children, whose changes the log names by their own tables
    primary_key: tuple[str, ...]
    published: bool  # the publication covers the table there now


def table_facts(
    conn: psycopg.Connection, table: tuple[str, str], publication: str
) -> TableFacts | None:
    row = conn.execute(
        """
        SELECT c.relreplident::text,
          coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum)
                    FROM pg_index i JOIN pg_attribute a
                      ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                    WHERE i.indrelid = c.oid
                      AND ((c.relreplident = 'd' AND i.indisprimary)
                        OR (c.relreplident = 'i' AND i.indisreplident))), '{}'),
          coalesce((SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
                    WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped
                      AND attgenerated <> ''), '{}'),
          c.relkind = 'r' AND c.relhassubclass,
          coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum)
                    FROM pg_index i JOIN pg_attribute a
                      ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                    WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
          EXISTS (SELECT 1 FROM pg_publication_tables p WHERE p.pubname = %s
                  AND p.schemaname = n.nspname AND p.tablename = c.relname)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s
        """,
        (publication, *table),
    ).fetchone()
    if row is None:
        return None
    identity, columns, generated, children, key, published = row
    return TableFacts(
        str(identity),
        tuple(columns),
        tuple(generated),
        bool(children),
        tuple(key),
        bool(published),
    )


def create_slot(conn: psycopg.Connection, slot: str) -> int:
    """The slot made; its consistent point (every transaction committed after it is in the
    slot). Creating waits for the transactions open at that moment to end."""
    conn.execute(f"SET statement_timeout = '{CREATE_TIMEOUT_SECONDS}s'")
    try:
        row = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN)
        ).fetchone()
    except psycopg.errors.QueryCanceled:
        raise SlotWaited(CREATE_TIMEOUT_SECONDS) from None
    finally:
        conn.execute("RESET statement_timeout")
    assert row is not None
    return parse_lsn(row[0])


def settled_end(conn: psycopg.Connection) -> str:
    """The log's end now, returned once every transaction running now has ended: every
    transaction that commits before it is then visible to a snapshot taken after (as a slot's
    consistent point is). Waits at most `CREATE_TIMEOUT_SECONDS`."""
    end = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    running = conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()
    assert end is not None and running is not None
    deadline = time.monotonic() + CREATE_TIMEOUT_SECONDS
    while True:
        oldest = conn.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()
        assert oldest is not None
        if int(oldest[0]) >= int(running[0]):
            return str(end[0])
        if time.monotonic() > deadline:
            raise SlotWaited(CREATE_TIMEOUT_SECONDS)
        time.sleep(0.1)


def flush_bound(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def advance(conn: psycopg.Connection, slot: str, position: int) -> None:
    """The slot moved to `position`, if it is behind it (moving back is an error)."""
    state = slot_state(conn, slot)
    if state is None or (state.confirmed_flush_lsn or 0) >= position:
        return
    conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(position)))


def peek(
    conn: psycopg.Connection, slot: str, publication: str, bound: int, limit: int
) -> Iterator[tuple[int, Message | None]]:
    """The slot's messages up to `bound` (at most about `limit` changes: whole transactions),
    decoded as they stream from a server-side cursor."""
    query = (
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, "
        "'proto_version', '1', 'publication_names', %s)"
    )
    shown = conn.execute("SHOW server_encoding").fetchone()
    encoding = python_encoding(str(shown[0]) if shown else "UTF8")
    with conn.transaction(), conn.cursor(name=f"peek_{slot}") as cursor:
        cursor.itersize = 10_000
        cursor.execute(query, (slot, format_lsn(bound), limit, publication))
        for lsn, data in cursor:
            yield parse_lsn(lsn), decode(bytes(data), encoding)


def drop(conn: psycopg.Connection, slot: str, publication: str) -> bool:
    """The slot and the publication dropped; whether there was a slot."""
    state = slot_state(conn, slot)
    if state is not None:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
    return state is not None


def server_lacks(conn: psycopg.Connection) -> list[str]:
    """What the server lacks for log capture, each with the fix."""
    lacking = []
    level = conn.execute("SHOW wal_level").fetchone()
    if level is None or level[0] != "logical":
        lacking.append(
            f"wal_level is {level[0] if level else 'unknown'}, not logical: set wal_level = "
            "logical in postgresql.conf (a managed service: its logical replication setting) "
            "and restart the server"
        )
    role = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if role is None or not role[0]:
        lacking.append(
            "the source's user has no REPLICATION privilege: ALTER ROLE <user> REPLICATION"
        )
    return lacking


def _split(name: str) -> list[str]:
    """`schema.table`, either part maybe "quoted" (a quoted part may hold a dot)."""
    return [m.group(0) for m in re.finditer(r'"(?:[^"]|"")*"|[^.]+', name)]


def _identifier(part: str) -> str:
    if part.startswith('"') and part.endswith('"'):
        return part[1:-1].replace('""', '"')
    return part.lower()
