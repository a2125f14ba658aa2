"""The state machine for `capture: log` tables: a PostgreSQL table read from the server's log into
an Iceberg lake, merge or append, against a reference of its own (`LogReference`).

Each example is one table (a fresh schema, a key of one or two columns of a drawn type, the
cursor machine's value columns; with composites but without arrays, which log capture refuses:
they are `exclude_columns`). Rules change the source as applications do, with nothing a cursor
could see: inserts, updates that leave `cur` as it was (or stamp it), hard deletes, key changes,
TRUNCATE, keys deleted or changed away inserted again, transactions left open across runs
(inserts, updates, a key change, a delete; committed or rolled back later), columns added (then
written, or not), widened and dropped (with changes from before the drop waiting, or a row
after); and run the asset: in this process (reading at most a drawn number of changes, so that
runs stop part way through the log), as a full refresh, killed in a subprocess at a pause point
("session", "staged", "mid-commit", "committed"; or not killed, when it ends first), or until
settled (everything committed, runs until none stops at its limit; the next reads nothing). The
table's REPLICA IDENTITY is drawn too: default (a delete logs its key) or full (its old row).

The reference, after every successful run (the source is still while a run reads it, so its
committed rows are those before the run's bound):

* merge: the lake is the source's committed rows, exactly, every column (and only those); a
  run that stopped at its limit leaves it as the source was after one of the transactions
  committed since the last run left it there (whole transactions, in commit order);
* append: the rows a first load (or full refresh) wrote (`change_op` NULL) are the source's rows
  then; every change committed since appears once, in commit order by (`change_lsn`,
  `change_seq`): an insert or update with the row as written, a delete with the key alone
  (its old row under FULL), a TRUNCATE with NULLs; a transaction still open is absent and
  arrives whole once committed; one rolled back never does; a run that stopped at its limit
  holds the first ones, in order;
* a column the lake holds dropped from the source fails the next run that has changes to load
  (from after the drop or before it) with "lost column", changing nothing; a full refresh then
  rebuilds the table. A run that commits nothing leaves the lake's columns as they were (as a
  cursor table's): a column added joins at the next commit;
* a run's position (`cursor`, type lsn) never moves back; a second run over a settled source
  reads no change and writes nothing.

Every example drops its slot and publication at the end: slots are the server's.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, note, seed, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql
from psycopg.rows import dict_row

from incremental_assets.cursor import parse_lsn
from incremental_assets.pause_points import ENV as PAUSE_AT
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.sources import log_changes
from incremental_assets.sources.pg_slot import names_of
from incremental_assets_tests.model.lake import LakeState, as_read, read_lake_state
from incremental_assets_tests.model.runner import RUN_TIMEOUT, SHIPPED_INSTANCE, Outcome, Runner
from incremental_assets_tests.model.source import Clock, Key, LateWriter, Row, Snapshot
from incremental_assets_tests.model.source_postgres import PostgresTable, open_postgres_table
from incremental_assets_tests.model.table import (
    CURSOR,
    CURSOR_TYPES,
    KEY_TYPES,
    TABLE,
    TableConfig,
    frozen,
    next_cursor,
)
from incremental_assets_tests.support.postgres import PostgresServer

LOG_MODES = ("merge", "append")
# Where a killed run pauses: with its Spark session, its files staged, mid-commit, committed.
LOG_PAUSE_POINTS = ("session", "staged", "mid-commit", "committed")
# The columns an append table's change log adds.
CHANGE_OP, CHANGE_LSN, CHANGE_SEQ = "change_op", "change_lsn", "change_seq"
CHANGE_COLUMNS = (CHANGE_OP, CHANGE_LSN, CHANGE_SEQ)
# The source's array columns, which log capture refuses: left out of every log table.
ARRAYS = ("tags", "stamps", "grid", "pts")
PICKS = st.lists(st.integers(0, 99), min_size=1, max_size=3)


@dataclass
class LogEnv:
    """What every example shares: the server, the Spark session, where to put files, limits."""

    server: PostgresServer
    spark_resource: IncrementalSparkResource
    workdir: Path
    connect: str | None = None  # a Spark Connect server for killed runs; None: no kills
    modes: tuple[str, ...] = LOG_MODES
    key_types: tuple[str, ...] = KEY_TYPES
    kills: int = 1  # killed runs per example, at most
    # Whether a killed run may be a full refresh (off: to look past the failure
    # `test_regressions.py` names for it, while the product has it).
    kill_full_refreshes: bool = True
    # Whether a column may be dropped while changes committed before the drop wait for a run
    # (off: a run reads them first; the failure `test_regressions.py` names for it).
    drops_with_changes_waiting: bool = True
    # Whether a column may be added while changes committed before it wait for a run (off:
    # runs read them first; a run that stops at its limit before the addition fails the next,
    # as `test_regressions.py` says).
    adds_with_changes_waiting: bool = True
    # The most changes a run in this process reads (`log_changes.CHANGES_PER_RUN`, drawn per
    # example; None: the product's own), so that runs stop part way through the log.
    limits: tuple[int | None, ...] = (None,)
    schema_changes: int = 2  # per example, at most
    truncates: int = 1  # per example, at most
    instance: Path | None = SHIPPED_INSTANCE
    run_timeout: float = RUN_TIMEOUT
    verbose: bool = False
    steps: int = 0  # steps run so far, over every example (the soak's budget)
    examples: int = 0


@st.composite
def log_configs(
    draw: st.DrawFn, modes: tuple[str, ...], key_types: tuple[str, ...] = KEY_TYPES
) -> TableConfig:
    """A log table: its mode, key, key type, the type of `cur` (a value column here) and
    whether it holds the composite column (its arrays left out)."""
    mode = draw(st.sampled_from(modes))
    key = draw(st.sampled_from([("id",), ("id",), ("id", "k2")]))
    shapes = draw(st.booleans())
    return TableConfig(
        database="postgres",
        mode=mode,
        key=key,
        paired=len(key) > 1,
        key_type=draw(st.sampled_from(key_types)),
        cursor_type=draw(st.sampled_from(tuple(CURSOR_TYPES))),
        shapes=shapes,
        exclude=ARRAYS if shapes else (),
    )


def log_entry(config: TableConfig, schema: str) -> dict[str, Any]:
    """The table's entry in the config: captured from the log, keyed, its arrays left out."""
    entry: dict[str, Any] = {
        "name": TABLE,
        "source": "db",
        "table": f"{schema}.{TABLE}",
        "mode": config.mode,
        "capture": "log",
        "primary_key": list(config.key),
    }
    if config.exclude:
        entry["exclude_columns"] = list(config.exclude)
    return entry


@dataclass(frozen=True)
class Change:
    """One change as an append table must log it: what it did and the row's values (a delete:
    the key alone; a TRUNCATE: none)."""

    op: str
    values: tuple[tuple[str, Any], ...]

    def row(self, columns: list[str]) -> tuple[Any, ...]:
        values = dict(self.values)
        return (self.op, *(values.get(c) for c in columns))


@dataclass
class LogReference:
    """What the lake must hold: merge, the source's committed rows; append, the rows the last
    full load read and every change committed since, in order."""

    config: TableConfig
    loaded: tuple[Row, ...] | None = None  # append: the last full load's rows (None: none yet)
    changes: list[Change] = field(default_factory=list)  # append: committed since that load
    position: int | None = None  # the position the last successful run recorded
    # The source after each transaction since the last full load (the first: as it loaded),
    # and where the lake was among them after the last run (a run that stops at its limit of
    # changes, `log_more_waiting`, leaves the lake at one of them, whole transactions); append:
    # how many changes the lake held then.
    history: list[Snapshot] = field(default_factory=list)
    floor: int = 0
    logged: int = 0

    def full_load(self, snapshot: Snapshot) -> None:
        self.loaded = snapshot.rows
        self.changes = []
        self.history = [snapshot]
        self.floor = self.logged = 0

    def committed(self, changes: list[Change], after: Snapshot) -> None:
        if self.loaded is not None:
            self.changes.extend(changes)
            self.history.append(after)

    def check(self, snapshot: Snapshot, lake: LakeState, md: dict[str, Any]) -> list[str]:
        out = []
        if md.get("cursor_type") != "lsn":
            out.append(f"cursor_type {md.get('cursor_type')!r}, not lsn")
        position = parse_lsn(str(md.get("cursor")))
        if self.position is not None and position < self.position and not _whole(md):
            out.append(f"the position moved back: {self.position} -> {position}")
        self.position = position
        if lake.unreadable:
            return [*out, f"the lake can't be read: {lake.unreadable}"]
        data = [c for c in lake.columns if c not in CHANGE_COLUMNS]
        more = bool(md.get("log_more_waiting"))
        if more:  # the lake holds the source as some transaction left it, not as it is now
            return out + self._check_partial(lake, data)
        self.floor = len(self.history) - 1
        self.logged = len(self.changes)
        columns = list(snapshot.columns)
        # A run that commits nothing leaves the lake's schema as it was (as a cursor table's
        # does): a column added (or widened) since joins at the next commit.
        committed = _whole(md) or bool(md.get("log_changes"))
        missing = [c for c in columns if c not in data]
        if missing and committed:
            out.append(f"source columns {missing} are not in the lake (it has {data})")
        for name in columns:
            held, wanted = lake.types.get(name), snapshot.lake_types[name]
            if held is not None and held != wanted and committed:
                out.append(f"column {name} is {held} in the lake, {wanted} in the source")
        if self.config.mode == "merge":
            extra = [c for c in data if c not in columns]
            if extra:
                out.append(f"the lake holds columns the source lacks: {extra}")
            expected = Counter(tuple(r.get(c) for c in columns) for r in snapshot.rows)
            got = Counter(tuple(r.get(c) for c in columns) for r in lake.rows)
            return out + _diff("the source's rows", columns, expected, got)
        return out + self._check_log(lake, data)

    def _check_partial(self, lake: LakeState, data: list[str]) -> list[str]:
        """A run that read up to its limit: the lake is the source after some transaction
        at or past where the last run left it (merge); the changes logged are the first ones
        committed, in order, at least as many as before (append)."""
        if self.config.mode == "merge":
            for k in range(self.floor, len(self.history)):
                columns = list(self.history[k].columns)
                expected = Counter(tuple(r.get(c) for c in columns) for r in self.history[k].rows)
                if expected == Counter(tuple(r.get(c) for c in columns) for r in lake.rows):
                    self.floor = k
                    return []
            last = self.history[-1]
            columns = list(last.columns)
            expected = Counter(tuple(r.get(c) for c in columns) for r in last.rows)
            got = Counter(tuple(r.get(c) for c in columns) for r in lake.rows)
            return [
                f"more changes wait, and the lake is the source after none of the transactions "
                f"{self.floor}..{len(self.history) - 1} since the last run; against the last:",
                *_diff("the source's rows now", columns, expected, got),
            ]
        logged = sorted(
            (r for r in lake.rows if r.get(CHANGE_OP) is not None),
            key=lambda r: (r[CHANGE_LSN], r[CHANGE_SEQ]),
        )
        seen = [(r[CHANGE_OP], *(r.get(c) for c in data)) for r in logged]
        first = [c.row(data) for c in self.changes[: len(seen)]]
        out = []
        if seen != first or len(seen) < self.logged:
            out.append(
                f"more changes wait, and the {len(seen)} changes logged (before: {self.logged}) "
                "are not the first ones committed, in order"
            )
            out += _diff(
                "the first committed changes", ["change_op", *data], Counter(first), Counter(seen)
            )
        self.logged = len(seen)
        return out

    def _check_log(self, lake: LakeState, data: list[str]) -> list[str]:
        assert self.loaded is not None
        out = []
        base = Counter(tuple(r.get(c) for c in data) for r in lake.rows if r.get(CHANGE_OP) is None)
        wanted = Counter(tuple(r.get(c) for c in data) for r in self.loaded)
        out += _diff("the full load's rows", data, wanted, base)
        logged = sorted(
            (r for r in lake.rows if r.get(CHANGE_OP) is not None),
            key=lambda r: (r[CHANGE_LSN], r[CHANGE_SEQ]),
        )
        got = [(r[CHANGE_OP], *(r.get(c) for c in data)) for r in logged]
        expected = [c.row(data) for c in self.changes]
        if got != expected:
            columns = ["change_op", *data]
            out += _diff("the committed changes", columns, Counter(expected), Counter(got))
            if Counter(got) == Counter(expected):
                out.append(
                    "the changes are all there, in another order: by (change_lsn, change_seq) "
                    f"{[g[:2] for g in got]}, committed {[e[:2] for e in expected]}"
                )
        return out


def _whole(md: dict[str, Any]) -> bool:
    """Whether a run loaded the table whole (a first load or a full refresh)."""
    return str(md.get("extract_filter") or "").startswith("the whole table")


def _diff(
    what: str, columns: list[str], expected: Counter[tuple[Any, ...]], got: Counter[tuple[Any, ...]]
) -> list[str]:
    out = []
    for value, n in sorted((expected - got).items(), key=repr):
        out.append(
            f"missing from the lake: {n} x {dict(zip(columns, value, strict=True))} ({what})"
        )
    for value, n in sorted((got - expected).items(), key=repr):
        out.append(
            f"extra in the lake: {n} x {dict(zip(columns, value, strict=True))} "
            f"(expected {expected[value]}, found {got[value]}; {what})"
        )
    return out


@dataclass
class Writer:
    """A transaction left open: its connection, the keys it holds, the changes it made."""

    late: LateWriter
    changes: list[Change] = field(default_factory=list)


class LogMachine(RuleBasedStateMachine):
    env: LogEnv  # set by `log_machine_class`

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.directory: Path | None = None
        self.writers: list[Writer] = []
        self.kills = self.schema_changes = self.truncates = self.runs = 0
        self.frontier: Any = None  # the last explicit value written to `cur`
        # Keys deleted or changed away, with their key columns' values (`reinsert`).
        self.gone: dict[Key, dict[str, Any]] = {}
        self.dirty = True
        self.unread = False  # a transaction committed since the last run that read to the end
        self.killed_at: str | None = None
        self.did: Counter[str] = Counter()

    # -- the example's table -----------------------------------------------------------------

    def setup(
        self, config: TableConfig, identity: str = "default", limit: int | None = None
    ) -> None:
        """`identity`: the table's REPLICA IDENTITY, default (the key) or full (a delete's log
        holds the old row, and an append table logs it)."""
        env = self.env
        env.examples += 1
        self.config = config
        self.directory = env.workdir / f"log-example-{uuid.uuid4().hex[:8]}"
        source = self.stack.enter_context(open_postgres_table(env.server, config))
        self.source: PostgresTable = source
        self.runner = Runner(
            self.directory,
            source.source,
            log_entry(config, source.schema),
            env.spark_resource,
            env.connect,
            "iceberg",
            instance=env.instance,
            timeout=env.run_timeout,
        )
        names = names_of(self.runner.project.table(TABLE))
        # Before the schema is dropped (the stack closes in reverse).
        self.stack.callback(_drop_slot, env.server, names.slot, names.publication)
        self.reference = LogReference(config)
        self.identity = identity
        self.limit = limit
        if identity == "full":
            source.conn.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
        self._say(
            "table",
            f"# {self.config}, replica identity {identity}, limit {limit}: slot {names.slot}",
        )

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None and self.directory is not None:
                if self.dirty or self.writers or self.unread:
                    self.settle()
                if self.env.verbose:
                    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(self.did.items()))
                    print(
                        f"  log example {self.env.examples}: {self.config}, replica identity "
                        f"{self.identity}, limit {self.limit}\n    {summary}",
                        flush=True,
                    )
        finally:
            for writer in self.writers:
                writer.late.conn.close()
            self.stack.close()
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)

    def check_invariants(self, *args: Any, **kwargs: Any) -> None:
        self.env.steps += 1
        super().check_invariants(*args, **kwargs)

    # -- helpers -----------------------------------------------------------------------------

    def _say(self, kind: str, text: str) -> None:
        self.did[kind] += 1
        if currently_in_test_context():
            note(text)
        else:
            print(text, flush=True)

    def _fail(self, what: str, problems: list[str]) -> None:
        raise AssertionError(f"{what}:\n  - " + "\n  - ".join(problems))

    def _snapshot(self) -> Snapshot:
        snapshot = self.source.snapshot()
        columns = self.config.visible(list(snapshot.columns))
        return Snapshot(
            {c: snapshot.columns[c] for c in columns},
            tuple({c: row[c] for c in columns} for row in snapshot.rows),
            {c: as_read("iceberg", snapshot.lake_types[c]) for c in columns},
        )

    def _lake(self) -> LakeState:
        return read_lake_state(self.runner.lake)

    def _locked(self) -> set[Key]:
        return {key for writer in self.writers for key in writer.late.keys}

    def _free_rows(self) -> list[Row]:
        locked = self._locked()
        return [row for _, row in self.source.live_rows() if self.source.key_of(row) not in locked]

    @staticmethod
    def _pick(rows: list[Row], picks: list[int]) -> list[Row]:
        return list({p % len(rows): rows[p % len(rows)] for p in picks}.values())

    def _label(self, row: Row) -> str:
        return "/".join(str(row[c]) for c in self.config.key)

    def _stamp(self, touch: bool, row: Row | None = None, in_transaction: bool = False) -> Any:
        """`cur`'s value for a write: as the row has it (`touch` false), else a new one."""
        if not touch and row is not None:
            return row[CURSOR]
        if self.config.time_cursor:
            return Clock(in_transaction, self.config.cursor_type == "timestamptz")
        self.frontier = next_cursor(self.config.cursor_type, self.frontier, 1)
        return self.frontier

    def _change(self, op: str, row: Row | None) -> Change:
        """The change as the log gives it: a row's visible values; a delete's key alone."""
        if row is None:
            return Change(op, ())
        columns = self.config.visible(list(row))
        if op == "delete":
            if self.identity != "full":
                columns = list(self.config.key)
            self.gone[self.source.key_of(row)] = {c: row[c] for c in ("id", "k2")}
        return Change(op, tuple(sorted((c, frozen(row[c])) for c in columns)))

    def _moved_out(self, row: Row) -> Change:
        """An update that moves a row to another key is logged after the old key's delete (its
        key alone), so that the change log replayed in order leaves no row there."""
        return Change("delete", tuple(sorted((c, frozen(row[c])) for c in self.config.key)))

    def _committed(self, changes: list[Change]) -> None:
        """One transaction committed: its changes, and the source's rows after it."""
        self.dirty = self.unread = True
        self.reference.committed(changes, self._snapshot())

    # -- source writes -----------------------------------------------------------------------

    @rule(count=st.integers(1, 4))
    def insert_rows(self, count: int) -> None:
        rows = []
        for _ in range(count):  # each its own transaction
            rows.append(self.source.insert(self._stamp(True)))
            self._committed([self._change("insert", rows[-1])])
        self._say("inserted", f"# inserted {[self._label(r) for r in rows]}")

    @rule(picks=PICKS, touch=st.booleans())
    def update_rows(self, picks: list[int], touch: bool) -> None:
        """Updates; `touch` false leaves `cur` as it was (no timestamp moves)."""
        rows = self._free_rows()
        if not rows:
            return
        done = []
        for row in self._pick(rows, picks):
            done.append(self.source.update(self.source.key_of(row), self._stamp(touch, row)))
            self._committed([self._change("update", done[-1])])
        how = "" if touch else ", cur untouched"
        self._say("updated", f"# updated {[self._label(r) for r in done]}{how}")

    @rule(picks=PICKS)
    def hard_delete(self, picks: list[int]) -> None:
        rows = self._free_rows()
        if not rows:
            return
        chosen = self._pick(rows, picks)
        for row in chosen:
            self.source.delete(self.source.key_of(row))
            self._committed([self._change("delete", row)])
        self._say("deleted", f"# deleted {[self._label(r) for r in chosen]}")

    @rule(pick=st.integers(0, 99))
    def change_key(self, pick: int) -> None:
        """A row's key changed (`UPDATE ... SET id = ..., k2 = ...`), nothing else."""
        rows = self._free_rows()
        if not rows:
            return
        row = rows[pick % len(rows)]
        key = self.source.new_key()
        changed = self._update(self.source.conn, row, key)
        self.gone[self.source.key_of(row)] = {c: row[c] for c in ("id", "k2")}
        self._say("key changed", f"# key {self._label(row)} changed to {self._label(changed)}")
        self._committed([self._moved_out(row), self._change("update", changed)])

    @rule(pick=st.integers(0, 99))
    def reinsert(self, pick: int) -> None:
        """A key deleted or changed away inserted again (in the same run's window, maybe)."""
        live = {self.source.key_of(r) for _, r in self.source.live_rows()} | self._locked()
        gone = sorted((k for k in self.gone if k not in live), key=repr)
        if not gone:
            return
        key = gone[pick % len(gone)]
        row = self.source.insert(self._stamp(True), self.gone[key])
        self._say("reinserted", f"# reinserted {self._label(row)}")
        self._committed([self._change("insert", row)])

    def _update(self, conn: Any, row: Row, values: dict[str, Any]) -> Row:
        condition, params = self.source._where(self.source.key_of(row))
        statement = sql.SQL("UPDATE {} SET {} WHERE {} RETURNING *").format(
            sql.Identifier(TABLE),
            sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder()) for c in values
            ),
            condition,
        )
        with conn.cursor(row_factory=dict_row) as cur:
            changed = cur.execute(statement, [*values.values(), *params]).fetchone()
        assert changed is not None
        return dict(changed)

    @precondition(lambda self: not self.writers and self.truncates < self.env.truncates)
    @rule(then=st.integers(0, 2), together=st.booleans())
    def truncate(self, then: int, together: bool) -> None:
        """TRUNCATE, then `then` new rows: each its own transaction, or (`together`) all in
        one, with the TRUNCATE first."""
        self.truncates += 1
        if not together:
            self.source.conn.execute(f"TRUNCATE {TABLE}")
            self._say("truncated", "# TRUNCATE")
            self._committed([self._change("truncate", None)])
            if then:
                self.insert_rows(then)
            return
        late = self.source.open_writer()
        late.conn.execute(f"TRUNCATE {TABLE}")
        rows = [self.source.insert(self._stamp(True), conn=late.conn) for _ in range(then)]
        late.conn.commit()
        late.conn.close()
        self._say("truncated", f"# TRUNCATE and {[self._label(r) for r in rows]}, one transaction")
        self._committed(
            [self._change("truncate", None), *(self._change("insert", r) for r in rows)]
        )

    # -- transactions left open --------------------------------------------------------------

    @precondition(lambda self: self.runs > 0 and len(self.writers) < 2)
    @rule(
        inserts=st.integers(0, 2),
        picks=st.lists(st.integers(0, 99), max_size=2),
        delete=st.booleans(),
    )
    def open_transaction(self, inserts: int, picks: list[int], delete: bool) -> None:
        """A transaction whose writes commit after a later run's bound (never before the first
        run: making the slot waits for open transactions)."""
        writer = Writer(self.source.open_writer())
        self.writers.append(writer)
        conn = writer.late.conn
        for _ in range(max(inserts, 0 if picks else 1)):
            row = self.source.insert(self._stamp(True, in_transaction=True), conn=conn)
            writer.changes.append(self._change("insert", row))
            writer.late.keys.add(self.source.key_of(row))
        rows = self._free_rows()
        for n, pick in enumerate(picks):
            if not rows:
                break
            row = rows.pop(pick % len(rows))
            writer.late.keys.add(self.source.key_of(row))
            if n == 1 and not delete:  # the second row's key changed, in the transaction
                changed = self._update(conn, row, self.source.new_key())
                writer.late.keys.add(self.source.key_of(changed))
                self.gone[self.source.key_of(row)] = {c: row[c] for c in ("id", "k2")}
                writer.changes.extend([self._moved_out(row), self._change("update", changed)])
            elif delete and n == len(picks) - 1:
                condition, params = self.source._where(self.source.key_of(row))
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(TABLE), condition),
                    params,
                )
                writer.changes.append(self._change("delete", row))
            else:
                done = self.source.update(
                    self.source.key_of(row), self._stamp(n % 2 == 0, row, True), conn
                )
                writer.changes.append(self._change("update", done))
        self.dirty = True
        self._say("opened", f"# transaction opened: {[c.op for c in writer.changes]}")

    @precondition(lambda self: bool(self.writers))
    @rule(which=st.integers(0, 1), rollback=st.booleans())
    def end_transaction(self, which: int, rollback: bool) -> None:
        writer = self.writers[which % len(self.writers)]
        self._end(writer, rollback)

    def _end(self, writer: Writer, rollback: bool) -> None:
        self.writers.remove(writer)
        if rollback:
            writer.late.conn.rollback()
            self._say("rolled back", "# rolled back an open transaction")
        else:
            writer.late.conn.commit()
            self._say("committed", f"# committed {[c.op for c in writer.changes]}")
            self._committed(writer.changes)
        writer.late.conn.close()

    # -- schema changes ----------------------------------------------------------------------

    def _can_change_schema(self) -> bool:
        return not self.writers and self.schema_changes < self.env.schema_changes

    @precondition(lambda self: self._can_change_schema())
    @rule(then=st.sampled_from(("insert", "update", "nothing")))
    def add_column(self, then: str) -> None:
        """A column (no default: older rows hold NULL, as the lake's will), then a row written
        with it, a new one or an old one updated, or nothing (it joins at the next commit)."""
        self.schema_changes += 1
        if not self.env.adds_with_changes_waiting:
            self._read_all()
        self._say("added", f"# added {self.source.add_column(False)}")
        self.dirty = True
        if then == "update" and self._free_rows():
            self.update_rows([0], touch=False)
        elif then == "insert":
            self.insert_rows(1)

    @precondition(lambda self: self._can_change_schema())
    @rule(pick=st.integers(0, 99), key=st.booleans())
    def widen_column(self, pick: int, key: bool = False) -> None:
        """A value column (`key`: a key column) widened (`ALTER ... TYPE`, which logs no row),
        then a row inserted: the lake takes the wider type."""
        columns = [(n, k) for n, k in self.source.widenable(keys=key) if n not in ARRAYS]
        if not columns:
            return
        self.schema_changes += 1
        name, kind = columns[pick % len(columns)]
        self.source.retype(name, kind)
        self._say("widened key" if key else "widened", f"# widened {name} to {kind}")
        self.insert_rows(1)

    @precondition(lambda self: self._can_change_schema() and bool(self._droppable()))
    @rule(pick=st.integers(0, 99), insert=st.booleans())
    def drop_column(self, pick: int, insert: bool) -> None:
        """A column dropped, then (`insert`, or when no change waits for the next run) a row
        inserted: the next run is refused ("lost column") while the lake holds the column,
        whether the changes it would load came after the drop or before it (their values for
        the column are in the log, and the source's schema has lost it); a full refresh then
        rebuilds the table."""
        self.schema_changes += 1
        if not self.env.drops_with_changes_waiting:
            self._read_all()
        columns = self._droppable()
        name = columns[pick % len(columns)]
        held = name in self._lake().columns
        self.source.drop_column(name)
        waiting = self.unread
        self._say(
            "dropped",
            f"# dropped {name} (the lake {'holds' if held else 'lacks'} it; "
            f"{'changes' if waiting else 'no change'} committed before it wait for a run)",
        )
        if insert or not waiting:
            self.insert_rows(1)
        if held:
            self._expect_refusal(f"{name} dropped", ["lost column", name, "--full"])
            self._run(full_refresh=True)

    def _read_all(self) -> None:
        """Runs until no committed change waits for one."""
        for _ in range(50):
            if not self.unread:
                return
            self._run()

    def _droppable(self) -> list[str]:
        return [c for c in self.source.droppable() if c not in ARRAYS]

    def _expect_refusal(self, what: str, named: list[str]) -> None:
        lake, count = self._lake(), self.runner.materializations()
        outcome = self.runner.run()
        message = (outcome.failure or "").strip()
        problems = []
        if outcome.success:
            problems.append(f"the run succeeded: {outcome.metadata.get('extract_filter')}")
        elif outcome.timed_out:
            problems.append(outcome.describe())
        else:
            missing = [text for text in [f"Table '{TABLE}'", *named] if text not in message]
            if missing:
                problems.append(f"the message should name {missing}: {message!r}")
        if not self._lake().unchanged(lake):
            problems.append("the lake changed")
        if self.runner.materializations() != count:
            problems.append("a materialization was recorded")
        if problems:
            self._fail(f"a run after {what} was not refused cleanly", problems)
        self._say("refused", f"# refused: {message[:200]}")

    # -- runs --------------------------------------------------------------------------------

    @precondition(lambda self: self.dirty or self.unread)
    @rule()
    def run(self) -> None:
        self._run()

    @precondition(lambda self: self.dirty and not self.writers)
    @rule()
    def full_refresh_run(self) -> None:
        """`--full` (making the slot again waits for open transactions: none is open)."""
        self._run(full_refresh=True)

    def _run(self, full_refresh: bool = False) -> Outcome:
        snapshot = self._snapshot()
        with _changes_per_run(self.limit):
            outcome = self.runner.run(full_refresh)
        if not outcome.success:
            after = f" (after a run killed at {self.killed_at})" if self.killed_at else ""
            self._fail(f"the run failed{after}", [outcome.describe()])
        self._check(outcome, snapshot)
        return outcome

    def _check(self, outcome: Outcome, snapshot: Snapshot) -> None:
        self.runs += 1
        md = outcome.metadata
        if _whole(md):
            self.reference.full_load(snapshot)
        more = " (more wait: stopped at its limit)" if md.get("log_more_waiting") else ""
        self._say(
            "run stopped at its limit" if more else "run",
            f"# run {self.runs}: {md.get('extract_filter')}, {md.get('log_changes')} "
            f"change(s){more}, written {md.get('rows_written')}, "
            f"lake {md.get('dagster/row_count')} rows",
        )
        problems = self.reference.check(snapshot, self._lake(), md)
        self.dirty = False
        self.unread = bool(md.get("log_more_waiting"))
        self.killed_at = None
        if problems:
            self._fail(f"run {self.runs} broke the guarantees", problems)

    def _can_kill(self) -> bool:
        return (
            (self.dirty or self.unread)
            and self.env.connect is not None
            and self.kills < self.env.kills
        )

    @precondition(lambda self: self._can_kill())
    @rule(point=st.sampled_from(LOG_PAUSE_POINTS), full_refresh=st.booleans())
    def killed_run(self, point: str, full_refresh: bool) -> None:
        """`dagster asset materialize` killed with SIGKILL at a pause point (a full refresh only
        with no transaction open); the next run recovers."""
        full_refresh = full_refresh and not self.writers and self.env.kill_full_refreshes
        self.kills += 1
        snapshot = self._snapshot()
        outcome = self.runner.killed_run(point, full_refresh)
        what = "full refresh" if full_refresh else "run"
        if outcome.killed:
            self._say("killed", f"# {what} killed at {point}")
            self.killed_at = f"{point}, {what}"
            self.dirty = True
            return
        if not outcome.success:
            self._fail(f"the subprocess {what} failed", [outcome.describe()])
        self._say("not killed", f"# the {what} finished before reaching {point}")
        self._check(outcome, snapshot)

    @precondition(
        lambda self: (
            bool(self.writers)
            and self.runs > 0
            and self.env.connect is not None
            and self.kills < self.env.kills
        )
    )
    @rule(which=st.integers(0, 1))
    def commit_during_run(self, which: int) -> None:
        """An open transaction committed while a run (`dagster asset materialize`) waits at
        "session", its bound frozen and the log read: the run leaves it out, a later run brings
        it whole. (A run with nothing to write starts no session: it ends first.)"""
        self.kills += 1  # the budget of runs in a subprocess
        writer = self.writers[which % len(self.writers)]
        snapshot = self._snapshot()
        marker = self.runner.directory / f"paused-{time.monotonic_ns()}"
        before = self.runner.materializations()
        process = self.runner.start(False, **{PAUSE_AT: f"session:{marker}"})
        deadline = time.monotonic() + self.runner.timeout
        while not marker.exists() and process.poll() is None:
            if time.monotonic() > deadline:
                self.runner.stop(process)
                self._fail("a run to pause at session never got there", [])
            time.sleep(0.1)
        paused = marker.exists()
        if paused:  # committed now; the model learns it once the run is checked
            self.writers.remove(writer)
            writer.late.conn.commit()
            writer.late.conn.close()
            marker.unlink()
        outcome = self.runner.finish(process, before)
        if not outcome.success:
            self._fail("the run a transaction committed under failed", [outcome.describe()])
        what = "committed while a run waited" if paused else "the run ended before its session"
        self._say(what, f"# {what}: {[c.op for c in writer.changes]}")
        self._check(outcome, snapshot)
        if paused:
            self._committed(writer.changes)  # for a later run
        else:
            self._end(writer, rollback=False)

    @precondition(lambda self: self.dirty or self.unread or bool(self.writers))
    @rule()
    def settle(self) -> None:
        """Commit every open transaction and run twice: the second reads nothing, writes
        nothing."""
        for writer in list(self.writers):
            self._end(writer, rollback=False)
        for _ in range(50):  # until no more wait past a run's limit
            if not self._run().metadata.get("log_more_waiting"):
                break
        second = self._run()
        md = second.metadata
        wrote = {k: md.get(k) for k in ("log_changes", "rows_written") if md.get(k)}
        if wrote:
            self._fail("a second run over a settled source", [f"it still read or wrote {wrote}"])


@contextmanager
def _changes_per_run(limit: int | None) -> Iterator[None]:
    """Runs in this process read at most `limit` changes (None: as many as the product does):
    `log_changes.CHANGES_PER_RUN`, read when a run reads the log."""
    if limit is None:
        yield
        return
    saved = log_changes.CHANGES_PER_RUN
    log_changes.CHANGES_PER_RUN = limit
    try:
        yield
    finally:
        log_changes.CHANGES_PER_RUN = saved


def _drop_slot(server: PostgresServer, slot: str, publication: str) -> None:
    """The example's slot and publication dropped (a killed run's session may still hold the
    slot for a moment: it is ended first)."""
    with server.connect(autocommit=True) as conn:
        for _ in range(30):
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if row is None:
                break
            if row[0] is not None:
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                time.sleep(0.5)
                continue
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            break
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))


def log_machine_class(env: LogEnv) -> type[LogMachine]:
    class Machine(LogMachine):
        pass

    Machine.env = env
    configs = log_configs(env.modes, env.key_types)
    Machine.setup = initialize(  # type: ignore[method-assign]
        config=configs,
        identity=st.sampled_from(("default", "full")),
        limit=st.sampled_from(env.limits),
    )(LogMachine.setup)
    Machine.__name__ = Machine.__qualname__ = "LogMachine"
    return Machine


def run_log_machine(
    env: LogEnv, *, seed_value: int, examples: int, steps: int, shrink: bool
) -> None:
    """`examples` random sequences of `steps` steps each on log tables, from `seed_value`."""
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(
        seed(seed_value)(log_machine_class(env)),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            derandomize=False,
            phases=phases,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        ),
    )
