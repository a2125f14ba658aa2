"""The state machine for `capture: log` tables: a PostgreSQL or MariaDB table read from the
server's log (PostgreSQL's WAL through a slot, MariaDB's binary log) into an Iceberg lake, merge or
append, against a reference of its own (`LogReference`). What differs between the two is
`LogDatabase`: the position (an LSN; `file:offset`), the REPLICA IDENTITY drawn (PostgreSQL; a
binary log's rows are whole, as under FULL), whether a TRUNCATE can share a transaction (not on
MariaDB, where it commits on its own), whether a run that loads the table whole waits for open
transactions (PostgreSQL's slot), and whether the log can be purged under the position (MariaDB).

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
Between runs the lake is disturbed (`lake_events.py`: its table's folder removed, `lake.path`
moved, the lake copied with its catalog, the folder restored from a copy taken after an earlier
run, another writer's commit through PyIceberg, a new Dagster instance), MariaDB's binary logs are
purged under the recorded position, and the table's maintenance compacts it (between runs, and
between a killed run's commit and its record).

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
* a run's position (`cursor`, type lsn or binlog) never moves back; a second run over a settled
  source reads no change and writes nothing;
* a lake that isn't the table the position was recorded for (removed, moved, copied, restored,
  another writer's commit) and (MariaDB) a position whose binary log was purged refuse the next
  run, with changes waiting or none, naming the stored position (or the file), the lake and
  `--full`: nothing written, the position unmoved, no run recorded; the full refresh then
  rebuilds the table exactly. A new Dagster instance's first run loads the table whole;
* maintenance changes no row, and the next run goes on from the recorded position (a killed
  run's unrecorded commit under it is redone in place);
* MariaDB writes a text key in another case or with trailing spaces (which it holds equal): the
  log and the lake don't, so an append table logs such an update as a move, the old spelling's
  delete first.

Every PostgreSQL example drops its slot and publication at the end: slots are the server's.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
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

from incremental_assets.cursor import parse_binlog, parse_lsn
from incremental_assets.pause_points import ENV as PAUSE_AT
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.sources import log_changes
from incremental_assets.sources.pg_slot import names_of
from incremental_assets_tests.model.lake import LakeState, as_read, read_lake_state
from incremental_assets_tests.model.lake_events import (
    LAKE_EVENTS,
    LakeCopies,
    LakeEventRules,
    another_writers_delete,
    catalog_restored,
    copy_lake,
    maintain_table,
    refusal_named,
)
from incremental_assets_tests.model.machine import KEEP_SNAPSHOTS, open_source
from incremental_assets_tests.model.runner import RUN_TIMEOUT, SHIPPED_INSTANCE, Outcome, Runner
from incremental_assets_tests.model.source import (
    Clock,
    Key,
    LateWriter,
    Row,
    Server,
    Snapshot,
    SourceTable,
)
from incremental_assets_tests.model.source_mariadb import MariaDbTable
from incremental_assets_tests.model.source_postgres import PostgresTable
from incremental_assets_tests.model.table import (
    CURSOR,
    CURSOR_TYPES,
    KEY_TYPES,
    TABLE,
    TableConfig,
    frozen,
    next_cursor,
)
from incremental_assets_tests.support.mariadb import MariaDbServer
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
# What can happen to a log table's lake between runs: the cursor machine's events, and another
# writer's commit (PyIceberg deleting a row).
ANOTHER_WRITER = "another-writer"
LOG_LAKE_EVENTS = (*LAKE_EVENTS, ANOTHER_WRITER)


@dataclass(frozen=True)
class LogDatabase:
    """What differs between the databases whose logs the machine reads."""

    name: str  # the config's `database`
    cursor_type: str  # the position's: lsn, or binlog (`file:offset`)
    # The REPLICA IDENTITY drawn (PostgreSQL); a binary log's row image is FULL: a delete logs
    # its whole old row, as under REPLICA IDENTITY FULL.
    identities: tuple[str, ...]
    # Whether a transaction can hold a TRUNCATE and the inserts after it (MariaDB's TRUNCATE
    # commits on its own: the inserts are a transaction after it).
    truncate_in_transaction: bool
    # Whether a run that loads the table whole waits for the transactions open (PostgreSQL's
    # slot is made, or its position taken, once they end; MariaDB's snapshot needs no wait).
    load_waits: bool
    # Whether the log's files can be purged under a recorded position (a binary log).
    purges: bool

    def position(self, text: str) -> Any:
        """A recorded position as a value that orders as the log does."""
        return parse_lsn(text) if self.cursor_type == "lsn" else parse_binlog(text)


LOG_DATABASES = {
    "postgres": LogDatabase("postgres", "lsn", ("default", "full"), True, True, False),
    "mariadb": LogDatabase("mariadb", "binlog", ("full",), False, False, True),
}


def log_database(server: Server) -> LogDatabase:
    return LOG_DATABASES["postgres" if isinstance(server, PostgresServer) else "mariadb"]


@dataclass
class LogEnv:
    """What every example shares: the server, the Spark session, where to put files, limits."""

    server: PostgresServer | MariaDbServer
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
    # Events of the lake between runs (`LOG_LAKE_EVENTS`), and (MariaDB) binary logs purged
    # under the recorded position, per example, at most.
    lake_events: int = 0
    lake_event_kinds: tuple[str, ...] = LOG_LAKE_EVENTS
    purges: int = 0
    maintenance: int = 0  # the table's maintenance between runs per example, at most
    instance: Path | None = SHIPPED_INSTANCE
    run_timeout: float = RUN_TIMEOUT
    verbose: bool = False
    steps: int = 0  # steps run so far, over every example (the soak's budget)
    examples: int = 0


@st.composite
def log_configs(
    draw: st.DrawFn,
    modes: tuple[str, ...],
    key_types: tuple[str, ...] = KEY_TYPES,
    database: str = "postgres",
) -> TableConfig:
    """A log table: its mode, key, key type, the type of `cur` (a value column here) and
    whether it holds the composite column (its arrays left out; PostgreSQL's only)."""
    mode = draw(st.sampled_from(modes))
    key = draw(st.sampled_from([("id",), ("id",), ("id", "k2")]))
    shapes = database == "postgres" and draw(st.booleans())
    return TableConfig(
        database=database,
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
    position: Any = None  # the position the last successful run recorded
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

    def check(
        self, snapshot: Snapshot, lake: LakeState, md: dict[str, Any], database: LogDatabase
    ) -> list[str]:
        out = []
        if md.get("cursor_type") != database.cursor_type:
            out.append(f"cursor_type {md.get('cursor_type')!r}, not {database.cursor_type}")
        position = database.position(str(md.get("cursor")))
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


class LogMachine(LakeEventRules, RuleBasedStateMachine):
    env: LogEnv  # set by `log_machine_class`

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.directory: Path | None = None
        self.writers: list[Writer] = []
        self.kills = self.schema_changes = self.truncates = self.runs = 0
        self.lake_events = self.purges = self.maintenances = 0
        # Whether a run recorded a position this instance's next run goes on from.
        self.positioned = False
        self.copies = LakeCopies()  # of the lake after runs, for "restored"
        self.frontier: Any = None  # the last explicit value written to `cur`
        # Keys deleted or changed away, with their key columns' values (`reinsert`).
        self.gone: dict[Key, dict[str, Any]] = {}
        self.dirty = True
        self.unread = False  # a transaction committed since the last run that read to the end
        self.killed_at: str | None = None
        self.did: Counter[str] = Counter()

    # -- the example's table -----------------------------------------------------------------

    def setup(
        self, config: TableConfig, identity: str | None = None, limit: int | None = None
    ) -> None:
        """`identity`: the table's REPLICA IDENTITY, default (the key) or full (a delete's log
        holds the old row, and an append table logs it); None: the database's first."""
        env = self.env
        env.examples += 1
        self.config = config
        self.database = log_database(env.server)
        identity = identity or self.database.identities[0]
        self.directory = env.workdir / f"log-example-{uuid.uuid4().hex[:8]}"
        source = self.stack.enter_context(open_source(env.server, config))
        self.source: SourceTable = source
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
        self.reference = LogReference(config)
        self.identity = identity
        self.limit = limit
        where = f"database {source.schema}"
        if isinstance(env.server, PostgresServer):
            names = names_of(self.runner.project.table(TABLE))
            # Before the schema is dropped (the stack closes in reverse).
            self.stack.callback(_drop_slot, env.server, names.slot, names.publication)
            assert isinstance(source, PostgresTable)
            if identity == "full":
                source.conn.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")
            where = f"slot {names.slot}"
        self._say("table", f"# {self.config}, replica identity {identity}, limit {limit}: {where}")

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

    def _updated(self, row: Row, done: Row) -> list[Change]:
        """An update's changes: a move when it respelled the key (MariaDB writes a text key in
        another case or with trailing spaces, which the database holds equal and the log and the
        lake do not)."""
        update = self._change("update", done)
        if all(row[c] == done[c] for c in self.config.key):
            return [update]
        return [self._moved_out(row), update]

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
            self._committed(self._updated(row, done[-1]))
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
        changed = self.source.move(self.source.key_of(row), self.source.new_key())
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

    @precondition(lambda self: not self.writers and self.truncates < self.env.truncates)
    @rule(then=st.integers(0, 2), together=st.booleans())
    def truncate(self, then: int, together: bool) -> None:
        """TRUNCATE, then `then` new rows: each its own transaction, or (`together`) all in
        one, with the TRUNCATE first (MariaDB: the TRUNCATE commits on its own, then the inserts
        are one transaction)."""
        self.truncates += 1
        if not together:
            self.source.truncate()
            self._say("truncated", "# TRUNCATE")
            self._committed([self._change("truncate", None)])
            if then:
                self.insert_rows(then)
            return
        late = self.source.open_writer()
        self.source.truncate(late.conn)
        truncated = [self._change("truncate", None)]
        if not self.database.truncate_in_transaction:
            self._committed(truncated)
            truncated = []
        rows = [self.source.insert(self._stamp(True), conn=late.conn) for _ in range(then)]
        late.conn.commit()
        late.conn.close()
        self._say("truncated", f"# TRUNCATE and {[self._label(r) for r in rows]}, one transaction")
        self._committed([*truncated, *(self._change("insert", r) for r in rows)])

    # -- transactions left open --------------------------------------------------------------

    @precondition(lambda self: self.positioned and len(self.writers) < 2)
    @rule(
        inserts=st.integers(0, 2),
        picks=st.lists(st.integers(0, 99), max_size=2),
        delete=st.booleans(),
    )
    def open_transaction(self, inserts: int, picks: list[int], delete: bool) -> None:
        """A transaction whose writes commit after a later run's bound (never before a first
        load: making the slot waits for open transactions)."""
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
                changed = self.source.move(self.source.key_of(row), self.source.new_key(), conn)
                writer.late.keys.add(self.source.key_of(changed))
                self.gone[self.source.key_of(row)] = {c: row[c] for c in ("id", "k2")}
                writer.changes.extend([self._moved_out(row), self._change("update", changed)])
            elif delete and n == len(picks) - 1:
                self.source.delete(self.source.key_of(row), conn)
                writer.changes.append(self._change("delete", row))
            else:
                done = self.source.update(
                    self.source.key_of(row), self._stamp(n % 2 == 0, row, True), conn
                )
                writer.changes.extend(self._updated(row, done))
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
        rebuilds the table. (Without a recorded position, a new instance's, the next run loads
        the table whole.)"""
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
        if held and self.positioned:  # else the next run loads the table whole anyway
            self._refused_until_rebuilt(f"{name} dropped", ["lost column", name, "--full"])

    def _read_all(self) -> None:
        """Runs until no committed change waits for one."""
        for _ in range(50):
            if not self.unread:
                return
            self._run()

    def _droppable(self) -> list[str]:
        return [c for c in self.source.droppable() if c not in ARRAYS]

    def _expect_refusal(self, what: str, named: list[str]) -> None:
        """The next run fails with a message naming the table and `named`, and changes
        nothing: not the lake, not the recorded position, nor records a run."""
        lake, count = self._lake(), self.runner.materializations()
        recorded = self.runner.recorded_cursor()
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
        if self.runner.recorded_cursor() != recorded:
            problems.append(f"the position moved: {recorded} -> {self.runner.recorded_cursor()}")
        if problems:
            self._fail(f"a run after {what} was not refused cleanly", problems)
        self._say("refused", f"# refused: {message[:200]}")

    def _refused_until_rebuilt(self, what: str, named: list[str], new_row: bool = False) -> None:
        """The next run is refused (`_expect_refusal`), then (`new_row`) again with a change
        waiting; a full refresh then rebuilds the table from the source."""
        self._expect_refusal(what, named)
        if new_row:
            self.insert_rows(1)
            self._expect_refusal(f"{what}, with a change waiting", named)
        self._run(full_refresh=True)

    # -- the lake between runs ---------------------------------------------------------------

    def _can_disturb_lake(self, *kinds: str) -> bool:
        """After a run recorded a position (not a killed one's: its commit may be in the lake),
        as often as the budget allows, when the full refresh that follows may start."""
        return (
            self.positioned
            and self.killed_at is None
            and self.lake_events < self.env.lake_events
            and self._can_load_whole()
            and any(kind in self.env.lake_event_kinds for kind in kinds)
        )

    def _lake_disturbed(self, kind: str, what: str, new_row: bool) -> None:
        """The lake is not the table the recorded position was recorded for: the next run is
        refused before it reads the log (with changes waiting or none), naming the stored
        position, the lake and the fix, writing nothing and moving nothing; `--full` rebuilds
        the table from the source."""
        self.lake_events += 1
        self.dirty = True
        self._say(kind, f"# {what}")
        self._refused_until_rebuilt(what, refusal_named(self.runner), new_row)

    @precondition(lambda self: self._can_disturb_lake("copied"))
    @rule(new_row=st.booleans())
    def copy_lake(self, new_row: bool) -> None:
        """The whole lake copied with its catalog and `lake.path` pointed at the copy, whose
        catalog names the original's table (Iceberg's locations are absolute): refused; the
        full refresh rebuilds the table in the copy and leaves the original as it was."""
        self.copies.drop()
        was = self._lake()
        original, target = copy_lake(self.runner)
        what = f"the lake copied to {target}, and lake.path changed to it"
        self._lake_disturbed("lake copied", what, new_row)
        if not read_lake_state(original).unchanged(was):
            self._fail("rebuilding a copied lake", [f"the original lake at {original} changed"])

    @precondition(
        lambda self: (
            self._can_disturb_lake("restored", "restored-with-catalog") and bool(self.copies)
        )
    )
    @rule(pick=st.integers(0, 99), with_catalog=st.booleans(), new_row=st.booleans())
    def restore_lake(self, pick: int, with_catalog: bool, new_row: bool) -> None:
        """The table's folder put back from a copy taken after an earlier run, and
        (`with_catalog`) the catalog's file with it."""
        with_catalog = catalog_restored(self.env.lake_event_kinds, with_catalog)
        older = self.copies.older(self.runner.latest_metadata().get("lake_commit"))
        if not older:
            return
        what = self.copies.restore(self.runner, older[pick % len(older)], with_catalog)
        self._lake_disturbed("lake restored", what, new_row)

    @precondition(lambda self: self._can_disturb_lake(ANOTHER_WRITER))
    @rule(pick=st.integers(0, 99), new_row=st.booleans())
    def another_writer(self, pick: int, new_row: bool) -> None:
        """Another engine's commit to the lake's table after the position was recorded: a
        row deleted through PyIceberg."""
        notes = sorted({r["note"] for r in self._lake().rows if r.get("note") is not None})
        if not notes:
            return
        what = another_writers_delete(self.runner, notes[pick % len(notes)])
        self._lake_disturbed("another writer", what, new_row)

    @precondition(lambda self: self._can_disturb_lake("new-instance"))
    @rule()
    def new_instance(self) -> None:
        """A new, empty Dagster instance over the lake: its first run has no position to go
        on from, and loads the table whole (the lake then is the source)."""
        self.lake_events += 1
        self.copies.drop()
        self.runner.new_home()
        self.positioned = False
        self.dirty = True
        self._say("new instance", f"# a new Dagster instance at {self.runner.home}")

    @precondition(
        lambda self: (
            self.database.purges
            and self.positioned
            and self.killed_at is None
            and self.purges < self.env.purges
        )
    )
    @rule(new_row=st.booleans())
    def purge_log(self, new_row: bool) -> None:
        """The server's binary logs purged up to the one it writes now: the recorded
        position's file is gone, so the next run is refused, naming it, until a full refresh
        (the server may keep a file it still needs: then nothing is refused)."""
        self.purges += 1
        recorded = str(self.runner.recorded_cursor())
        kept = _purge_binary_logs(self.source)
        if recorded.split(":")[0] in kept:
            self._say("log kept", f"# binary logs purged, but {recorded}'s file is kept: {kept}")
            return
        self.dirty = True
        self._say("log purged", f"# binary logs purged up to {kept}, past {recorded}")
        named = ["is gone", recorded, f"incremental-assets run {TABLE} --full"]
        self._refused_until_rebuilt("the binary log purged", named, new_row)

    @precondition(lambda self: self.positioned and self.maintenances < self.env.maintenance)
    @rule(keep=KEEP_SNAPSHOTS, run_after=st.booleans())
    def maintain(self, keep: int, run_after: bool) -> None:
        """The table's maintenance, as a job of its own runs it between runs (after a run
        killed past its commit too: `kill_then_maintain`), compacting these small tables and
        expiring snapshots past `keep`: its rows stay as they were, and (`run_after`) the next
        run goes on from the recorded position."""
        self.maintenances += 1
        before = self._lake()
        if not before.exists:
            return
        done = maintain_table(self.runner, keep)
        after = self._lake()
        self._say(
            "maintained",
            f"# maintenance, keep_snapshots {keep}: {done or 'nothing due'} "
            f"({len(before.files)} -> {len(after.files)} files)",
        )
        columns = before.columns
        held = Counter(tuple(r.get(c) for c in columns) for r in after.rows)
        problems = _diff(
            "the rows before",
            columns,
            Counter(tuple(r.get(c) for c in columns) for r in before.rows),
            held,
        )
        if after.columns != columns:
            problems.append(f"the columns changed: {columns} -> {after.columns}")
        if problems:
            self._fail("maintenance between runs changed the table", problems)
        self.dirty = True
        if run_after:
            self._run()

    @precondition(
        lambda self: (
            self._can_kill() and self.positioned and self.maintenances < self.env.maintenance
        )
    )
    @rule(keep=KEEP_SNAPSHOTS)
    def kill_then_maintain(self, keep: int) -> None:
        """A row inserted, a run killed past its commit (not recorded), then the table's
        maintenance and the run that must recover: it reads the same changes again over the
        compacted files."""
        self.insert_rows(1)
        if self._kill("committed", full_refresh=False):
            self.did["maintained after a kill"] += 1
            self.maintain(keep, run_after=True)

    # -- runs --------------------------------------------------------------------------------

    @precondition(lambda self: (self.dirty or self.unread) and self._can_run())
    @rule()
    def run(self) -> None:
        self._run()

    def _can_load_whole(self) -> bool:
        """Whether a run that loads the table whole may start: PostgreSQL's waits for the
        transactions open (to make its slot, or take its position), so none may be."""
        return not (self.writers and self.database.load_waits)

    @precondition(lambda self: self.dirty and self._can_load_whole())
    @rule()
    def full_refresh_run(self) -> None:
        self._run(full_refresh=True)

    def _run(self, full_refresh: bool = False) -> Outcome:
        snapshot = self._snapshot()
        # The run after a killed one reads as many changes as the product does, as the killed
        # run (a subprocess) did: the product's rerun reads what the killed run committed, and
        # more, never less (soak --capture log --seed 4121 read less, under the drawn limit).
        limit = None if self.killed_at else self.limit
        with _changes_per_run(limit):
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
        lake = self._lake()
        problems = self.reference.check(snapshot, lake, md, self.database)
        self.dirty = False
        self.unread = bool(md.get("log_more_waiting"))
        self.killed_at = None
        self.positioned = True
        if problems:
            self._fail(f"run {self.runs} broke the guarantees", problems)
        commit = md.get("lake_commit")
        if commit is not None and self._can_disturb_lake("restored", "restored-with-catalog"):
            self.copies.keep(self.runner, commit, lake.format_version)

    def _can_run(self) -> bool:
        """Whether the next run may start: a first load (no position) waits as `--full` does."""
        return self.positioned or self._can_load_whole()

    def _can_kill(self) -> bool:
        return (
            (self.dirty or self.unread)
            and self._can_run()
            and self.env.connect is not None
            and self.kills < self.env.kills
        )

    @precondition(lambda self: self._can_kill())
    @rule(point=st.sampled_from(LOG_PAUSE_POINTS), full_refresh=st.booleans())
    def killed_run(self, point: str, full_refresh: bool) -> None:
        """`dagster asset materialize` killed with SIGKILL at a pause point (a full refresh only
        when it needn't wait for the transactions open); the next run recovers."""
        self._kill(point, full_refresh)

    def _kill(self, point: str, full_refresh: bool) -> bool:
        """A killed run; whether it reached `point` and was killed there (else it is checked
        as the run it was)."""
        full_refresh = full_refresh and self._can_load_whole() and self.env.kill_full_refreshes
        self.kills += 1
        snapshot = self._snapshot()
        outcome = self.runner.killed_run(point, full_refresh)
        what = "full refresh" if full_refresh else "run"
        if outcome.killed:
            self._say("killed", f"# {what} killed at {point}")
            self.killed_at = f"{point}, {what}"
            self.dirty = True
            return True
        if not outcome.success:
            self._fail(f"the subprocess {what} failed", [outcome.describe()])
        self._say("not killed", f"# the {what} finished before reaching {point}")
        self._check(outcome, snapshot)
        return False

    @precondition(
        lambda self: (
            bool(self.writers)
            and self.positioned
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


def _purge_binary_logs(source: SourceTable) -> list[str]:
    """The server's binary logs purged up to the one it writes now (a new one started first):
    the files it keeps."""
    assert isinstance(source, MariaDbTable)
    with source.server.connect() as conn, conn.cursor() as cursor:
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("SHOW MASTER STATUS")
        current = cursor.fetchone()
        assert current is not None
        # A file the server still needs is kept (an error): what it keeps says so.
        with suppress(pymysql.Error):
            cursor.execute("PURGE BINARY LOGS TO %s", (current[0],))
        cursor.execute("SHOW BINARY LOGS")
        return [str(row[0]) for row in cursor.fetchall()]


def log_machine_class(env: LogEnv) -> type[LogMachine]:
    class Machine(LogMachine):
        pass

    Machine.env = env
    database = log_database(env.server)
    configs = log_configs(env.modes, env.key_types, database.name)
    Machine.setup = initialize(  # type: ignore[method-assign]
        config=configs,
        identity=st.sampled_from(database.identities),
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
