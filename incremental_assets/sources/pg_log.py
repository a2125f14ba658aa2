"""A PostgreSQL table's log (`capture: log`): its slot made before the first load, and each run's
changes read from it up to a frozen bound, over an ordinary connection (`pg_slot.py`).

Positions are LSNs (`16/B374D848`). The slot is checked (there, its log not lost, not moved past
the recorded position by anything else) and advanced to the recorded position before each read,
so the log before it is released; the read peeks, never consumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import psycopg

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.cursor import CursorType, format_lsn, parse_lsn
from incremental_assets.errors import SourceError, TableProblem
from incremental_assets.sources import log_changes
from incremental_assets.sources.log_changes import (
    Log,
    LogRead,
    LogRefused,
    full_refresh_fix,
    gather,
)
from incremental_assets.sources.log_errors import (
    lacks_error,
    lost_error,
    refused_error,
    source_failed,
)
from incremental_assets.sources.pg_client import connect
from incremental_assets.sources.pg_slot import (
    SlotWaited,
    advance,
    create_slot,
    ensure_publication,
    flush_bound,
    names_of,
    peek,
    server_lacks,
    settled_end,
    slot_state,
    table_facts,
)
from incremental_assets.sources.pgoutput import Message


class PgLog:
    """The log of one PostgreSQL table, through its replication slot."""

    cursor_type = CursorType.LSN

    def __init__(self, table: TableSpec) -> None:
        self.table = table
        self.names = names_of(table)

    def begin(self, log: Log) -> str:
        """The publication and the slot; a position from which the slot keeps every change and
        before which every transaction is in the load that follows.

        A slot that is there and keeps its log is kept, and not moved: a full refresh killed part
        way leaves it where the last recorded position still reads it. The position is then the
        log's end now, once every transaction running at that moment has ended (as making a slot
        waits), so a change the last run was refused on is behind it. A slot gone, or whose log
        was lost, is made again, at its consistent point.
        """
        table, names = self.table, self.names
        with _connected(table) as conn:
            lacking = server_lacks(conn)
            if lacking:
                raise lacks_error(table, lacking)
            ensure_publication(conn, names.publication, names.relation)
            self._check_table(conn)
            state = slot_state(conn, names.slot)
            if state is not None and state.wal_status != "lost":
                log(f"{table.name}: slot {names.slot} kept; waiting for open transactions to end")
                try:
                    start = settled_end(conn)
                except SlotWaited as exc:
                    raise _waited(table, names.slot, exc) from None
                log(f"{table.name}: slot {names.slot} keeps every change from {start}")
                return start
            if state is not None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (names.slot,))
            log(
                f"{table.name}: making the replication slot {names.slot} (it waits for open "
                "transactions to end)"
            )
            try:
                consistent = create_slot(conn, names.slot)
            except SlotWaited as exc:
                raise _waited(table, names.slot, exc) from None
        log(f"{table.name}: slot {names.slot} keeps every change from {format_lsn(consistent)}")
        return format_lsn(consistent)

    def _check_table(self, conn: psycopg.Connection) -> None:
        """The table is there, published, and its log can be read back exactly: an update that
        moves a row to another key names the old key, and no column the table loads is missing
        from the log."""
        table, names = self.table, self.names
        facts = table_facts(conn, names.relation, names.publication)
        where = f"{names.relation[0]}.{names.relation[1]}"
        problem: tuple[str, str, str | None] | None = None
        if facts is None:
            problem = (f"there is no table {where} (dropped, or renamed)", "table", None)
        elif not facts.published:
            problem = (
                f"{where} is not the table its publication {names.publication} covers (it was "
                "dropped and made again, or another one renamed in its place): its changes "
                "aren't in the log this table reads",
                "capture",
                full_refresh_fix(table.name),
            )
        elif facts.children:
            problem = (
                f"{where} has inheritance children, whose changes the log names by their own "
                "tables",
                "capture",
                "capture each child as a table of its own, or capture this one with a `cursor:`",
            )
        elif facts.identity == "n" or (
            facts.identity != "f"
            and set(facts.identity_columns) != set(table.primary_key or facts.primary_key)
        ):
            shown = ", ".join(facts.identity_columns) or "none"
            key = ", ".join(table.primary_key or facts.primary_key) or "none"
            problem = (
                f"{where}'s replica identity ({shown}) isn't the key the lake keeps rows by "
                f"({key}): an update that moves a row to another key would leave its old row in "
                "the lake, and a delete would name another row",
                "primary_key",
                f"ALTER TABLE {where} REPLICA IDENTITY FULL (or name the table's primary key in "
                "`primary_key:`), then run again",
            )
        else:
            generated = [c for c in facts.generated if not self._left_out(c)]
            if generated:
                problem = (
                    f"{where}'s column(s) {', '.join(generated)} are generated, and the log "
                    "doesn't carry generated values",
                    "exclude_columns",
                    f"leave them out (exclude_columns: [{', '.join(generated)}]), or capture the "
                    "table with a `cursor:`",
                )
        if problem is not None:
            message, field, fix = problem
            raise SourceError(
                TableProblem(table.name, f"{message}. Nothing was written.", field, fix)
            )

    def _left_out(self, column: str) -> bool:
        """A column the table doesn't load (`exclude_columns`, or not among `columns`)."""
        table = self.table
        if column in table.exclude_columns:
            return True
        kept = table.columns
        return kept is not None and column not in kept and column not in table.primary_key

    def read(self, previous: str) -> LogRead:
        """The slot checked and advanced to the recorded position, then read up to a frozen
        bound."""
        table, names = self.table, self.names
        since = parse_lsn(previous)
        with _connected(table) as conn:
            _check_slot(table, conn, names.slot, since)
            self._check_table(conn)
            advance(conn, names.slot, since)
            bound = flush_bound(conn)
            counter = _Counter()
            limit = log_changes.CHANGES_PER_RUN
            messages = peek(conn, names.slot, names.publication, bound, limit)
            try:
                gathered = gather(counter.counted(messages), names.relation, since, self._left_out)
            except LogRefused as exc:
                raise refused_error(table, exc) from None
            more = counter.rows >= limit
            after = slot_state(conn, names.slot)
        return LogRead(
            since=previous,
            position=format_lsn(gathered.position if more else max(bound, since)),
            gathered=gathered,
            more=more,
            retained=after.retained_bytes if after is not None else None,
        )


def _waited(table: TableSpec, slot: str, exc: SlotWaited) -> SourceError:
    return SourceError(
        TableProblem(
            table.name,
            f"readying the replication slot {slot} waited {exc.seconds} s for the transactions "
            "open on the server to end (the table's load must see every change before the "
            "position the slot keeps changes from, so it waits for those begun before), and some "
            "are still open. Nothing was written.",
            "capture",
            "end them (pg_stat_activity lists them: state 'idle in transaction', oldest "
            "xact_start first), or run again once they have ended.",
        )
    )


def _check_slot(table: TableSpec, conn: psycopg.Connection, slot: str, since: int) -> None:
    state = slot_state(conn, slot)
    lost = None
    if state is None:
        lost = f"its replication slot {slot} is gone (dropped, or the server was replaced)"
    elif state.wal_status == "lost":
        lost = (
            f"its replication slot {slot} lost the log it kept (max_slot_wal_keep_size let the "
            "server remove it)"
        )
    elif (state.confirmed_flush_lsn or 0) > since:
        lost = (
            f"its replication slot {slot} was moved to "
            f"{format_lsn(state.confirmed_flush_lsn or 0)}, past the position the last run "
            f"recorded ({format_lsn(since)}), by something other than this table's runs (or the "
            "cursor was set back)"
        )
    if lost is not None:
        raise lost_error(table, lost, format_lsn(since))


class _connected:
    """The source's connection, with values printed as the casts of `log_load` read them; a
    failure is the source's error."""

    def __init__(self, table: TableSpec) -> None:
        self.table = table

    def __enter__(self) -> psycopg.Connection:
        source = self.table.source
        assert isinstance(source, JdbcSourceSpec)
        try:
            self.conn = connect(source, pinned=True)
        except psycopg.Error as exc:
            raise source_failed(self.table, exc, "connecting") from None
        return self.conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.conn.close()
        if isinstance(exc, psycopg.Error):
            raise source_failed(self.table, exc, "reading the log") from None


class _Counter:
    def __init__(self) -> None:
        self.rows = 0

    def counted(
        self, messages: Iterable[tuple[int, Message | None]]
    ) -> Iterator[tuple[int, Message | None]]:
        for message in messages:
            self.rows += 1
            yield message
