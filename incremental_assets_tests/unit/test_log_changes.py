"""A run's changes to one table gathered from decoded log messages, without a server: whole
transactions past the recorded position, in log order, other tables' changes left out, TOAST
values the log didn't send refused unless the old row carries them, and the position to record."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from incremental_assets.sources.log_changes import Change, LogRefused, fold, gather, since_truncate
from incremental_assets.sources.pgoutput import (
    UNCHANGED,
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
ORDERS = Relation(
    7, "shop", "orders", "d", (Column("id", 20, -1, True), Column("note", 25, -1, False))
)
OTHER = Relation(9, "shop", "other", "d", (Column("id", 20, -1, True),))
TABLE = ("shop", "orders")


def _txn(lsn: int, *changes: Message) -> list[tuple[int, Message | None]]:
    """One transaction committed at `lsn`, ending 8 bytes later."""
    body = [(lsn - 100 + i, m) for i, m in enumerate(changes)]
    return [(lsn - 200, Begin(lsn, AT, 1)), *body, (lsn, Commit(lsn, lsn + 8, AT))]


def test_changes_come_in_log_order_with_their_transactions_commit_lsn() -> None:
    log = [
        (0, ORDERS),
        *_txn(1000, Insert(7, ("1", "a")), Insert(9, ("5",)), Update(7, ("1", "b"), None, False)),
        *_txn(2000, Delete(7, ("1",), old_is_key=True)),
    ]

    found = gather(log, TABLE, since=0)

    assert found.changes == [
        Change("insert", 1000, {"id": "1", "note": "a"}),
        Change("update", 1000, {"id": "1", "note": "b"}),
        Change("delete", 2000, {"id": "1"}),
    ]
    assert (found.transactions, found.position) == (2, 2008)


def test_transactions_committed_before_the_recorded_position_are_skipped_whole() -> None:
    log = [(0, ORDERS), *_txn(1000, Insert(7, ("1", "a"))), *_txn(2000, Insert(7, ("2", "b")))]

    found = gather(log, TABLE, since=1008)

    assert found.changes == [Change("insert", 2000, {"id": "2", "note": "b"})]
    assert (found.skipped, found.position) == (1, 2008)


def test_a_transaction_committed_at_the_recorded_bound_is_kept() -> None:
    """A run's peek stops once a record ends at its bound, so a commit that starts right there
    comes in the next run, which must keep it."""
    found = gather([(0, ORDERS), *_txn(1000, Insert(7, ("1", "a")))], TABLE, since=1000)

    assert found.changes == [Change("insert", 1000, {"id": "1", "note": "a"})]


def test_another_tables_transaction_moves_the_position_past_it() -> None:
    found = gather([(0, OTHER), *_txn(1000, Insert(9, ("5",)))], TABLE, since=500)

    assert found.changes == [] and found.position == 1008


def test_a_transaction_cut_off_by_the_bound_is_left_for_the_next_run() -> None:
    """The slot returns only transactions that committed before the bound; a chunk's end may
    still cut one: its changes are not kept, and the position stays before it."""
    log = [(0, ORDERS), *_txn(1000, Insert(7, ("1", "a"))), *_txn(2000, Insert(7, ("2", "b")))]

    found = gather(log[:-1], TABLE, since=0)

    assert found.changes == [Change("insert", 1000, {"id": "1", "note": "a"})]
    assert found.position == 1008


def test_an_unchanged_toast_value_comes_from_the_old_row_or_is_refused() -> None:
    full = Update(7, ("1", UNCHANGED), ("1", "long text"), old_is_key=False)
    keyed = Update(7, ("1", UNCHANGED), None, old_is_key=False)

    found = gather([(0, ORDERS), *_txn(1000, full)], TABLE, since=0)

    row: dict[str, str | None] = {"id": "1", "note": "long text"}
    assert found.changes == [Change("update", 1000, row, old=row)]
    with pytest.raises(LogRefused) as refused:
        gather([(0, ORDERS), *_txn(1000, keyed)], TABLE, since=0)
    assert "REPLICA IDENTITY FULL" in refused.value.fix


def test_a_truncate_is_a_change_and_a_merge_keeps_what_follows_the_last_one() -> None:
    log = [
        (0, ORDERS),
        (0, OTHER),
        *_txn(1000, Insert(7, ("1", "a"))),
        *_txn(2000, Truncate((9,), False, False)),  # another table's
        *_txn(3000, Truncate((7, 9), False, False), Insert(7, ("2", "b"))),
    ]

    found = gather(log, TABLE, since=0)
    truncated, kept = since_truncate(found.changes)

    assert [c.op for c in found.changes] == ["insert", "truncate", "insert"]
    assert truncated and kept == [Change("insert", 3000, {"id": "2", "note": "b"})]
    assert since_truncate(found.changes[:1]) == (False, found.changes[:1])


def test_a_new_columns_values_are_named_from_the_relation_that_adds_it() -> None:
    wider = Relation(7, "shop", "orders", "d", (*ORDERS.columns, Column("qty", 23, -1, False)))

    found = gather(
        [
            (0, ORDERS),
            *_txn(1000, Insert(7, ("1", "a"))),
            (0, wider),
            *_txn(2000, Insert(7, ("2", "b", "5"))),
        ],
        TABLE,
        since=0,
    )

    assert [c.values for c in found.changes] == [
        {"id": "1", "note": "a"},
        {"id": "2", "note": "b", "qty": "5"},
    ]


def test_a_fold_keeps_each_keys_last_change_after_the_last_truncate() -> None:
    changes = [
        Change("insert", 1, {"id": "9", "note": "gone with the truncate"}),
        Change.truncate(2),
        Change("insert", 3, {"id": "1", "note": "a"}),
        Change("insert", 3, {"id": "2", "note": "b"}),
        Change("update", 4, {"id": "1", "note": "a2"}),
        Change("delete", 5, {"id": "2"}),
        Change("insert", 6, {"id": "3", "note": "c"}),
    ]

    folded = fold(changes, ("id",))

    assert folded.truncated
    assert folded.rows == [{"id": "1", "note": "a2"}, {"id": "3", "note": "c"}]
    assert folded.deleted == [{"id": "2"}]


def test_an_update_that_changes_the_key_deletes_the_old_one() -> None:
    """pgoutput sends the old key with an update only when the key changed."""
    moved = Change("update", 2, {"id": "5", "note": "a"}, old={"id": "1"})

    folded = fold([Change("insert", 1, {"id": "1", "note": "a"}), moved], ("id",))

    assert (folded.truncated, folded.rows, folded.deleted) == (
        False,
        [{"id": "5", "note": "a"}],
        [{"id": "1"}],
    )


def test_a_delete_that_doesnt_name_the_tables_key_is_refused() -> None:
    with pytest.raises(LogRefused, match="replica identity") as refused:
        fold([Change("delete", 1, {"code": "x"})], ("id",))

    assert "REPLICA IDENTITY DEFAULT" in refused.value.fix


def test_a_key_shifted_onto_one_another_keeps_every_row_under_full_identity() -> None:
    """`UPDATE items SET id = id + 1` on a deferrable key: row 1 moves to 2 before row 2 moves
    to 3; the old row (REPLICA IDENTITY FULL) tells the moved-in row from the one moving out."""
    changes = [
        Change("update", 1, {"id": "2", "note": "a"}, old={"id": "1", "note": "a"}),
        Change("update", 1, {"id": "3", "note": "b"}, old={"id": "2", "note": "b"}),
        Change("update", 1, {"id": "4", "note": "c"}, old={"id": "3", "note": "c"}),
    ]

    folded = fold(changes, ("id",))

    assert folded.rows == [
        {"id": "2", "note": "a"},
        {"id": "3", "note": "b"},
        {"id": "4", "note": "c"},
    ]
    assert folded.deleted == [{"id": "1"}]
