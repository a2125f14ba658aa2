"""A run's changes to one table, gathered from the decoded log: pure Python.

The log holds whole transactions, each with its commit's LSN; the changes of one table are kept
in log order, with the LSN of the transaction that made them. A position means: every
transaction that commits before it is in the lake. So a transaction that commits before the
position the last run recorded is skipped whole (a slot's position can move back after a server
crash), and one that commits at it is kept (the slot sends those, and a run's peek stops short of
them). The position a run records is the end of the last transaction it kept, or the run's frozen
bound when it read everything up to it.

    Insert, Update   the new row, by column name; an unchanged TOAST value is taken from the
                     old row when the table's replica identity is FULL, else refused
    Delete           the old key (or the old row, under FULL)
    Truncate         every row before it gone (a merge keeps what follows the last one:
                     `since_truncate`)
    Relation         the table's columns, by which the rows' values are named
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from incremental_assets.cursor import CursorType
from incremental_assets.sources.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
    Value,
)

Op = Literal["insert", "update", "delete", "truncate"]
Log = Callable[[str], None]

# The changes one run reads at most (whole transactions: a larger one comes whole). The rest wait
# for the next run, which `log_more_waiting` says is due.
CHANGES_PER_RUN = 500_000


def position_type(url: str) -> CursorType:
    """The cursor of a table captured from the log of the database at a JDBC `url`."""
    return CursorType.LSN if url.startswith("jdbc:postgresql:") else CursorType.BINLOG


def full_refresh_fix(table: str) -> str:
    return (
        f"reload the table with `incremental-assets run {table} --full`, which starts the "
        "capture again from the table as it is."
    )


class LogRefused(Exception):
    """The log holds a change this package can't apply exactly: what, and the fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


@dataclass(frozen=True)
class Change:
    op: Op
    lsn: int  # the commit LSN of the transaction that made it
    values: dict[str, str | None]  # the row (a delete: its key, or the row under FULL)
    # An update's old key (its old row, under FULL), when the log sent it: the key changed
    old: dict[str, str | None] | None = None

    @staticmethod
    def truncate(lsn: int) -> Change:
        return Change("truncate", lsn, {})


@dataclass
class Gathered:
    """What a run read of the table's log."""

    changes: list[Change] = field(default_factory=list)
    position: int = 0  # the LSN to record: the last transaction kept ends here
    transactions: int = 0
    skipped: int = 0  # transactions committed before the recorded position


@dataclass(frozen=True)
class LogRead:
    """What a run read of a table's log, before anything is written; positions as the cursor's
    text (`ChangeLog.cursor_type`)."""

    since: str  # every transaction committed before it is in the lake
    position: str  # the position the run records
    gathered: Gathered
    more: bool  # the read stopped at `CHANGES_PER_RUN`: changes wait past `position`
    retained: int | None  # the log kept for the table, in bytes, where the database keeps it


class ChangeLog(Protocol):
    """A database's log of one table's changes (`sources/pg_log.py`, `sources/binlog.py`)."""

    cursor_type: CursorType

    def begin(self, log: Log) -> str:
        """Made ready before the table is loaded whole; the position its changes are kept from."""
        ...

    def read(self, previous: str) -> LogRead:
        """The changes since `previous`, up to a bound frozen now."""
        ...


def gather(
    messages: Iterable[tuple[int, Message | None]],
    table: tuple[str, str],
    since: int,
    left_out: Callable[[str], bool] = lambda _: False,
) -> Gathered:
    """The changes to `table` (schema, name) in transactions that committed at or past `since`,
    in log order. `messages`: (the message's LSN, the message) as the slot returns them;
    """
    found = Gathered(position=since)
    relations: dict[int, Relation] = {}
    commit_lsn: int | None = None
    pending: list[Change] = []
    for _, message in messages:
        match message:
            case Begin(final_lsn=lsn):
                commit_lsn, pending = lsn, []
            case Relation():
                relations[message.oid] = message
            case Insert() | Update() | Delete() | Truncate() if commit_lsn is not None:
                if commit_lsn < since:
                    continue
                change = _change(message, relations, table, commit_lsn, left_out)
                if change is not None:
                    pending.append(change)
            case Commit(commit_lsn=lsn, end_lsn=end):
                if commit_lsn is not None and lsn < since:
                    found.skipped += 1
                elif commit_lsn is not None:
                    found.changes.extend(pending)
                    found.transactions += 1
                    found.position = max(found.position, end)
                commit_lsn, pending = None, []
    return found


def since_truncate(changes: list[Change]) -> tuple[bool, list[Change]]:
    """Whether a TRUNCATE came (every row before it gone), and the changes after the last one."""
    last = max((i for i, c in enumerate(changes) if c.op == "truncate"), default=None)
    return (False, changes) if last is None else (True, changes[last + 1 :])


@dataclass(frozen=True)
class Folded:
    """A merge's changes folded per key, the last one winning: the rows to upsert and the keys
    to delete, after a TRUNCATE if one came (every row before it gone)."""

    truncated: bool
    rows: list[dict[str, str | None]]
    deleted: list[dict[str, str | None]]  # the keys' columns only


def fold(changes: list[Change], key: tuple[str, ...]) -> Folded:
    """Each key's last change among `changes`, in log order: an insert or update upserts its
    row, a delete removes the key; an update that changed the key removes the old one."""
    truncated, kept = since_truncate(changes)
    last: dict[tuple[str | None, ...], dict[str, str | None] | None] = {}
    for change in kept:
        if change.op == "delete":
            if not set(key) <= change.values.keys():
                raise LogRefused(
                    f"a delete in the log names its row by {', '.join(change.values)}, not by "
                    f"the table's key ({', '.join(key)}): the table's replica identity is "
                    "another index's",
                    fix="ALTER TABLE ... REPLICA IDENTITY DEFAULT (its primary key) or FULL, "
                    "then reload the table with a full refresh.",
                )
            last[_key_of(change.values, key)] = None
            continue
        old = moved_from(change, key)
        if old is not None and not _moved_in(last.get(old), change.old):
            last[old] = None
        last[_key_of(change.values, key)] = change.values
    rows = [row for row in last.values() if row is not None]
    deleted = [dict(zip(key, k, strict=True)) for k, row in last.items() if row is None]
    return Folded(truncated, rows, deleted)


def _moved_in(held: dict[str, str | None] | None, old: dict[str, str | None] | None) -> bool:
    """Whether the row this fold holds at a key is another than the one an update moves out
    of it: a deferrable key shifted in one statement moves a row in before the row there moves
    out. Only a whole old row (REPLICA IDENTITY FULL) tells them apart."""
    if held is None or old is None or not old.keys() >= held.keys():
        return False
    return any(old[name] != value for name, value in held.items())


def moved_from(change: Change, key: tuple[str, ...]) -> tuple[str | None, ...] | None:
    """The key an update moved its row from, if it changed the key."""
    if change.op != "update" or change.old is None:
        return None
    old = _key_of(change.old, key)
    return old if old != _key_of(change.values, key) else None


def _key_of(values: dict[str, str | None], key: tuple[str, ...]) -> tuple[str | None, ...]:
    return tuple(values.get(column) for column in key)


def _change(
    message: Insert | Update | Delete | Truncate,
    relations: dict[int, Relation],
    table: tuple[str, str],
    lsn: int,
    left_out: Callable[[str], bool],
) -> Change | None:
    """The change `message` makes to `table`, if any; the columns `left_out` (not loaded) are
    not read."""
    if isinstance(message, Truncate):
        hit = any(_is(relations.get(oid), table) for oid in message.relations)
        return Change.truncate(lsn) if hit else None
    relation = relations.get(message.relation)
    if not _is(relation, table):
        return None
    assert relation is not None
    names = [c.name for c in relation.columns]
    if isinstance(message, Insert):
        return Change("insert", lsn, _row(names, message.new, None, relation, left_out))
    if isinstance(message, Update):
        old = None if message.old_is_key else message.old
        sent = None if message.old is None else dict(zip(names, message.old, strict=False))
        if sent is not None and message.old_is_key:  # the old key's columns only
            sent = {c.name: sent[c.name] for c in relation.columns if c.key}
        return Change(
            "update",
            lsn,
            _row(names, message.new, old, relation, left_out),
            None if sent is None else {k: _text(v) for k, v in sent.items()},
        )
    keys = [c.name for c in relation.columns if c.key] if message.old_is_key else names
    if message.old_is_key:
        values = dict(zip(names, message.old, strict=False))
        return Change("delete", lsn, {k: _text(values.get(k)) for k in keys})
    return Change("delete", lsn, _row(names, message.old, None, relation, left_out))


def _row(
    names: list[str],
    new: tuple[Value, ...],
    old: tuple[Value, ...] | None,
    relation: Relation,
    left_out: Callable[[str], bool],
) -> dict[str, str | None]:
    row: dict[str, str | None] = {}
    for i, name in enumerate(names):
        if left_out(name):
            continue
        value = new[i]
        if value is UNCHANGED:
            if old is None or old[i] is UNCHANGED:
                raise LogRefused(
                    f"an update of {relation.namespace}.{relation.name} left its large value in "
                    f"column {name} unchanged, and the log sends such a value only with the old "
                    "row, which this table's replica identity doesn't include; the lake's "
                    "value can't be told apart from a new one here.",
                    fix=f"ALTER TABLE {relation.namespace}.{relation.name} REPLICA IDENTITY FULL "
                    "(the log then carries the old row), then reload the table with a full "
                    "refresh.",
                )
            value = old[i]
        row[name] = _text(value)
    return row


def _text(value: Value | None) -> str | None:
    return None if value is None or value is UNCHANGED else str(value)


def _is(relation: Relation | None, table: tuple[str, str]) -> bool:
    return relation is not None and (relation.namespace, relation.name) == table
