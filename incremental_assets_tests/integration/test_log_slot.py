"""A table's log read from a real PostgreSQL (wal_level=logical) through SQL functions: the
slot and publication made, changes peeked up to a frozen bound without consuming them, decoded
and gathered, the slot advanced; a transaction that commits after the bound comes whole in the
next read. No Spark."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from incremental_assets.sources.log_changes import Change, gather
from incremental_assets.sources.pg_slot import (
    advance,
    create_slot,
    drop,
    ensure_publication,
    flush_bound,
    peek,
    server_lacks,
    slot_state,
)
from incremental_assets_tests.support.postgres import Schema


@pytest.fixture
def conn(pg: Schema) -> Iterator[psycopg.Connection]:
    with pg.server.connect() as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


@pytest.fixture
def slot(pg: Schema, conn: psycopg.Connection) -> Iterator[str]:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, note text, placed timestamptz)")
    name = f"ia_{pg.name}"
    ensure_publication(conn, name, (pg.name, "orders"))
    create_slot(conn, name)
    yield name
    drop(conn, name, name)


def _flushed(conn: psycopg.Connection) -> int:
    """The bound once the commits so far are flushed: the suite's server commits without waiting
    for the flush (`synchronous_commit=off`), as a server may, and a checkpoint flushes it."""
    conn.execute("CHECKPOINT")
    return flush_bound(conn)


def _read(conn: psycopg.Connection, pg: Schema, slot: str, after: int) -> tuple[list[Change], int]:
    bound = _flushed(conn)
    found = gather(peek(conn, slot, slot, bound, 100_000), (pg.name, "orders"), after)
    return found.changes, max(found.position, after)


def test_every_change_is_read_in_order_and_again_until_the_slot_moves(
    pg: Schema, conn: psycopg.Connection, slot: str
) -> None:
    pg.execute(
        "INSERT INTO orders VALUES (1, 'a', '2026-01-01 00:00:00+00'), (2, 'b', NULL)",
        "UPDATE orders SET note = 'c' WHERE id = 1",
        "DELETE FROM orders WHERE id = 2",
    )

    changes, position = _read(conn, pg, slot, after=0)
    again, _ = _read(conn, pg, slot, after=0)

    assert [(c.op, c.values) for c in changes] == [
        ("insert", {"id": "1", "note": "a", "placed": "2026-01-01 00:00:00+00"}),
        ("insert", {"id": "2", "note": "b", "placed": None}),
        ("update", {"id": "1", "note": "c", "placed": "2026-01-01 00:00:00+00"}),
        ("delete", {"id": "2"}),
    ]
    assert again == changes  # a peek consumes nothing
    advance(conn, slot, position)
    state = slot_state(conn, slot)
    assert state is not None and state.confirmed_flush_lsn == position
    assert _read(conn, pg, slot, after=position)[0] == []


def test_a_transaction_committed_after_the_bound_comes_whole_next_time(
    pg: Schema, conn: psycopg.Connection, slot: str
) -> None:
    with pg.server.connect(autocommit=False) as writer:
        writer.execute(f"INSERT INTO {pg.name}.orders VALUES (1, 'early', NULL)")
        writer.execute(f"INSERT INTO {pg.name}.orders VALUES (2, 'early', NULL)")
        first, position = _read(conn, pg, slot, after=0)
        writer.commit()

    second, _ = _read(conn, pg, slot, after=position)

    assert first == []
    assert [c.values["id"] for c in second] == ["1", "2"]


def test_a_truncate_and_a_new_column_reach_the_log(
    pg: Schema, conn: psycopg.Connection, slot: str
) -> None:
    pg.execute(
        "INSERT INTO orders VALUES (1, 'a', NULL)",
        "TRUNCATE orders",
        "ALTER TABLE orders ADD COLUMN qty int",
        "INSERT INTO orders VALUES (2, 'b', NULL, 5)",
    )

    bound = _flushed(conn)
    found = gather(peek(conn, slot, slot, bound, 100_000), (pg.name, "orders"), 0)

    assert [c.op for c in found.changes] == ["insert", "truncate", "insert"]
    assert found.changes[-1].values == {"id": "2", "note": "b", "placed": None, "qty": "5"}


def test_the_suites_server_has_what_log_capture_needs(conn: psycopg.Connection) -> None:
    assert server_lacks(conn) == []
