"""The state machine: random sequences of source changes, cursor commands and runs of the asset.

Each example is one table with a drawn configuration (`setup`), a fresh PostgreSQL schema,
MariaDB database or folder of Parquet files (the server's kind decides), lake (plain Parquet or
Iceberg, as `Env` says) and on-disk Dagster instance holding the project's dagster.yaml (one run
per table's pool). Keys are integers (sparse 64-bit ones too), decimals, text or timestamps,
alone or with `k2`; rows hold arrays and composites (PostgreSQL) or maps and arrays of structs
(files) beside scalars. Rules change the source as applications do (inserts, updates that tie
with the cursor, soft and hard deletes, restores, identical rows, transactions left open across
runs, schema changes, maps rewritten in another order), operate the cursor, and run the asset:
in this process, as `dagster asset materialize` (to its end, or killed at a pause point), or
twice after letting everything settle; a run that hasn't ended after `Env.run_timeout` fails the
example as hung. Others change what an operator changes between runs: the table's settings
(mode, delete_column, the columns read, how the key is named, the source's key recreated with
deletes in the same window, the cursor column, an Iceberg merge table's `merge_writes`) and the
lake itself (its folder removed, moved, or restored from a copy taken after an earlier run; a
new, empty Dagster instance); and an Iceberg table's maintenance, run between runs as a job of
its own would (after a run killed past its commit too), with a retention that expires snapshots
and thresholds that compact these small tables. After every run that succeeds,
`Reference.check_run` states what the lake and the metadata must be (after maintenance,
`Reference.check_maintenance`); runs that are refused by design must fail cleanly, change
nothing, and, where the refusal says to, a full refresh then rebuilds the lake.

Hypothesis prints a failing example as the sequence of rules with their arguments; `note()`
lines (starting with `#`) say what each step did to the source (keys and cursor values).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
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

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.lake import LakeState, as_read, read_lake_state, rows_at
from incremental_assets_tests.model.lake_events import (
    LAKE_EVENTS,
    LakeCopies,
    LakeEventRules,
    catalog_restored,
    copy_lake,
    maintain_table,
    refusal_named,
)
from incremental_assets_tests.model.reference import Reference, RunFacts
from incremental_assets_tests.model.runner import (
    PAUSE_POINTS,
    RUN_TIMEOUT,
    SHIPPED_INSTANCE,
    Outcome,
    Runner,
)
from incremental_assets_tests.model.source import (
    Key,
    LateWriter,
    Row,
    RowRef,
    Snapshot,
    SourceTable,
)
from incremental_assets_tests.model.source_files import FilesRoot, open_files_table
from incremental_assets_tests.model.source_mariadb import open_mariadb_table
from incremental_assets_tests.model.source_postgres import open_postgres_table
from incremental_assets_tests.model.table import (
    CURSOR,
    CURSOR_TYPES,
    DELETED,
    KEY_TYPES,
    MERGE_WRITES,
    MERGE_WRITES_ON,
    TABLE,
    TableConfig,
    cursor_text,
    lag,
    minus_lookback,
    table_configs,
)
from incremental_assets_tests.support.mariadb import MariaDbServer
from incremental_assets_tests.support.postgres import PostgresServer

MODES = ("append", "merge", "full_refresh")
PICKS = st.lists(st.integers(0, 99), min_size=1, max_size=3)
BUMPS = st.integers(0, 2)  # 0: a tie with the frontier; else a new, higher cursor value
_INT_WIDTH = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
# The merge_writes a format v3 table takes (position_deletes on one is refused).
V3_WRITES = ("deletion_vectors", "copy_on_write")
# How many snapshots maintenance between runs keeps (`lake.keep_snapshots`; none for a time).
KEEP_SNAPSHOTS = st.integers(1, 3)


@dataclass
class Env:
    """What every example shares: the server, the Spark session, where to put files, limits."""

    server: PostgresServer | MariaDbServer | FilesRoot  # FilesRoot: a files source
    spark_resource: IncrementalSparkResource
    workdir: Path
    # A Spark Connect server for killed runs (with the server's JDBC driver); None: none.
    connect: str | None = None
    modes: tuple[str, ...] = MODES
    cursor_types: tuple[str, ...] = tuple(CURSOR_TYPES)  # drawn from (names of table.py)
    key_types: tuple[str, ...] = KEY_TYPES
    kills: int = 1  # killed runs per example, at most
    refusals: int = 1  # runs refused by design per example, at most
    schema_changes: int = 3  # per example, at most
    cursor_commands: int = 2  # per example, at most
    lake_format: str = "parquet"  # parquet | iceberg
    settings_changes: int = 0  # changes of the table's settings per example, at most
    lake_events: int = 0  # per example, at most
    lake_event_kinds: tuple[str, ...] = LAKE_EVENTS
    # Iceberg: the `merge_writes` values a merge table draws (none: left unset), and changes to
    # (as settings changes); maintenance runs between runs per example, at most.
    merge_writes: tuple[str, ...] = ()
    maintenance: int = 0
    keep_snapshots: tuple[int, ...] = (1, 2, 3)  # the retentions maintenance sets
    # Runs through `dagster asset materialize` per example, at most (with the Connect server;
    # the rest run in this process); the dagster.yaml every Dagster home gets (None: none, so no
    # pools); how long any run may take before it counts as hung.
    cli_runs: int = 0
    # Recreated source keys per example, at most (merge tables; a budget of their own, beside
    # the settings changes'); whether PostgreSQL tables hold arrays and composites
    # (`source_postgres.SHAPES`).
    key_changes: int = 1
    shapes: bool = True
    instance: Path | None = SHIPPED_INSTANCE
    run_timeout: float = RUN_TIMEOUT
    verbose: bool = False  # print a summary of each example that passed
    steps: int = 0  # steps run so far, over every example (the soak's budget)
    examples: int = 0

    @property
    def database(self) -> str:
        if isinstance(self.server, FilesRoot):
            return "files"
        return "postgres" if isinstance(self.server, PostgresServer) else "mariadb"


@dataclass(frozen=True)
class Before:
    """The lake before a run: its state (None after a killed run, whose commit may be in the
    lake), and its branches (Iceberg), which a successful run must not add to."""

    lake: LakeState | None
    branches: frozenset[str]


@contextmanager
def open_source(
    server: PostgresServer | MariaDbServer | FilesRoot, config: TableConfig
) -> Iterator[SourceTable]:
    """The example's table, created in a fresh schema (PostgreSQL), database (MariaDB) or
    folder (files)."""
    if isinstance(server, PostgresServer):
        with open_postgres_table(server, config) as table:
            yield table
    elif isinstance(server, FilesRoot):
        with open_files_table(server, config) as files:
            yield files
    else:
        with open_mariadb_table(server, config) as table:
            yield table


class LakeMachine(LakeEventRules, RuleBasedStateMachine):
    env: Env  # set by `machine_class`

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.directory: Path | None = None
        self.writers: list[LateWriter] = []
        self.kills = self.refusals = self.schema_changes = self.cursor_commands = 0
        self.settings_changes = self.lake_events = self.maintenances = 0
        self.copies = LakeCopies()
        # The `lake:` settings of the retention maintenance set (`maintain`).
        self.retention: dict[str, Any] = {}
        self.after_kill = False
        # Where the last run killed since a run succeeded was paused (None: none was killed).
        self.killed_at: str | None = None
        self.cli_runs = self.key_changes = 0
        self.dirty = True  # something changed since the last run: another run can tell more
        # The lake was removed, moved or restored since the last run, which (in full_refresh
        # mode) would have replaced it: a run refused for another reason may say this first.
        self.lake_behind = False
        self.runs = 0
        self.did: Counter[str] = Counter()

    # -- the example's table -----------------------------------------------------------------

    def setup(self, config: TableConfig) -> None:
        env = self.env
        env.examples += 1
        self.config = config
        self.directory = env.workdir / f"example-{uuid.uuid4().hex[:8]}"
        self.source: SourceTable = self.stack.enter_context(open_source(env.server, config))
        self.runner = Runner(
            self.directory,
            self.source.source,
            config.table_entry(self.source.schema),
            env.spark_resource,
            env.connect,
            env.lake_format,
            config.lake_entry(),
            instance=env.instance,
            timeout=env.run_timeout,
        )
        self.reference = Reference(config, lake=str(self.runner.lake))
        self._observe()

    def teardown(self) -> None:
        """Every example that got this far without failing ends settled and checked."""
        try:
            if sys.exc_info()[0] is None and self.directory is not None:
                if self.dirty or self.writers:
                    self.settle()
                if self.env.verbose:
                    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(self.did.items()))
                    print(
                        f"  example {self.env.examples}: {self.config}\n    {summary}", flush=True
                    )
        finally:
            for writer in self.writers:
                writer.conn.close()
            self.stack.close()
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)

    def check_invariants(self, *args: Any, **kwargs: Any) -> None:
        """Called after every step that completed: count it (the soak's budget)."""
        self.env.steps += 1
        super().check_invariants(*args, **kwargs)

    # -- helpers -----------------------------------------------------------------------------

    def _observe(self, written: set[Key] | None = None) -> None:
        self.dirty = True
        self.reference.observe(self._snapshot(), written or set())

    def _snapshot(self) -> Snapshot:
        """The committed source as a run under the current settings reads it: the columns it
        reads, each with the type the lake's readers see."""
        snapshot = self.source.snapshot()
        columns = self.config.visible(list(snapshot.columns))
        return Snapshot(
            {c: snapshot.columns[c] for c in columns},
            tuple({c: row[c] for c in columns} for row in snapshot.rows),
            {c: as_read(self.env.lake_format, snapshot.lake_types[c]) for c in columns},
        )

    def _locked(self) -> set[Key]:
        return {key for writer in self.writers for key in writer.keys}

    def _free_rows(self) -> list[tuple[RowRef, Row]]:
        """Committed rows no open transaction holds a lock on."""
        locked = self._locked()
        rows = self.source.live_rows()
        if not self.config.keyed:
            # Without a key, an UPDATE or DELETE scans the whole table; InnoDB's scan waits on
            # the row locks of another session's uncommitted inserts (PostgreSQL's doesn't).
            blocked = self.writers and self.config.database == "mariadb"
            return [] if blocked else rows
        return [(ref, row) for ref, row in rows if self.source.key_of(row) not in locked]

    @staticmethod
    def _pick(rows: list[tuple[RowRef, Row]], picks: list[int]) -> list[tuple[RowRef, Row]]:
        """The rows the picks name (modulo their number), each once, in order."""
        return list({p % len(rows): rows[p % len(rows)] for p in picks}.values())

    def _cursor(self, bump: int, in_transaction: bool = False) -> Any:
        return self.source.cursor_for(self.reference.frontier, bump, in_transaction)

    def _where(self, ref: RowRef, row: Row) -> Key | RowRef:
        return self.source.key_of(row) if self.config.keyed else ref

    def _label(self, row: Row) -> str:
        """`key@cursor` (the note instead of a key without one), for the recipe's comments."""
        key = self.source.key_of(row) if self.config.keyed else (row["note"],)
        flag = " deleted" if row.get(DELETED) else ""
        return f"{'/'.join(map(str, key))}@{_short(row[CURSOR])}{flag}"

    def _say(self, kind: str, text: str) -> None:
        """A comment in the printed recipe, counted for the soak's summary (printed as it goes
        when the steps are replayed by hand, as `test_regressions.py` does)."""
        self.did[kind] += 1
        if currently_in_test_context():
            note(text)
        else:
            print(text, flush=True)

    def _lake(self) -> LakeState:
        return read_lake_state(self.runner.lake)

    def _fail(self, what: str, problems: list[str]) -> None:
        raise AssertionError(f"{what}:\n  - " + "\n  - ".join(problems))

    def _lake_before_run(self) -> Before:
        """The lake before a run; its state None after a killed run (whose commit may be in the
        lake), its branches known anyway."""
        lake = self._lake()
        return Before(None if self.after_kill else lake, lake.branches)

    def _run(
        self, full_refresh: bool = False, lag_elapsed: bool = False, cli: bool = False
    ) -> Outcome:
        """Run the asset and check the run and the lake against the model: in this process, or
        (`cli`, while the budget and a Connect server allow) as `dagster asset materialize`."""
        before = self._lake_before_run()
        self.source.settle()
        snapshot = self._snapshot()
        cli = cli and self._can_run_cli()
        if cli:
            self.cli_runs += 1
            self.did["through dagster asset materialize"] += 1
            recorded = self.runner.materializations()
            outcome = self.runner.finish(self.runner.start(full_refresh), recorded)
        else:
            outcome = self.runner.run(full_refresh)
        if not outcome.success:
            self._fail(self._failed(outcome), [outcome.describe()])
        self._check(outcome, snapshot, full_refresh, before, lag_elapsed)
        return outcome

    def _can_run_cli(self) -> bool:
        return self.env.connect is not None and self.cli_runs < self.env.cli_runs

    def _failed(self, outcome: Outcome) -> str:
        """What went wrong, for the failure's first line: a run that hung says how long it
        waited, and whether a run killed before it may hold what it waited for (its pool slot)."""
        if not outcome.timed_out:
            return "the run failed"
        waited = f"waited {self.env.run_timeout:.0f} s without ending"
        if self.killed_at is not None:
            return f"the run after the kill (at {self.killed_at}) {waited}"
        return f"the run {waited}"

    def _check(
        self,
        outcome: Outcome,
        snapshot: Snapshot,
        full_refresh: bool,
        before: Before,
        lag_elapsed: bool = False,
    ) -> None:
        """Check a successful run (whatever ran it) and the lake it left against the model."""
        self.runs += 1
        lake = before.lake
        md = outcome.metadata
        self._say(
            "run" if md.get("full_refresh") is False else "full run",
            f"# run {self.runs}: cursor {md.get('previous_cursor')} -> {md.get('cursor')}, "
            f"full_refresh {md.get('full_refresh')}, read {md.get('rows_extracted')}, written "
            f"{md.get('rows_written')}, lake {md.get('dagster/row_count')} rows",
        )
        facts = RunFacts(
            metadata=md,
            snapshot=snapshot,
            full_requested=full_refresh,
            open_starts=tuple(w.started for w in self.writers),
            lag_elapsed=lag_elapsed,
            lake_rows_before=None if lake is None else len(lake.rows),
            lake_held_rows_before=None if lake is None else lake.holds_rows,
            head_before=None if lake is None else lake.head,
            branches_before=before.branches,
            defaulted=frozenset(self.source.defaulted),
        )
        after = self._lake()
        problems = self.reference.check_run(facts, after)
        self.after_kill = self.dirty = self.lake_behind = False
        self.killed_at = None
        if problems:
            self._fail(f"run {self.runs} broke the guarantees", problems)
        self._keep_copy(md, after)

    # -- source writes -----------------------------------------------------------------------

    @rule()
    def add_row(self) -> None:
        """One new row above the frontier (the simplest step, and so the one shrinking favours)."""
        self.insert_rows(1, 1)

    @rule(count=st.integers(1, 5), bump=BUMPS)
    def insert_rows(self, count: int, bump: int) -> None:
        rows = [self.source.insert(self._cursor(bump)) for _ in range(count)]
        self._say("inserted", f"# inserted {[self._label(r) for r in rows]}")
        self._observe({self.source.key_of(r) for r in rows} if self.config.keyed else set())

    @rule(picks=PICKS, bump=BUMPS)
    def update_rows(self, picks: list[int], bump: int) -> None:
        rows = self._free_rows()
        if not rows:
            return
        chosen = self._pick(rows, picks)
        done = [self.source.update(self._where(c, r), self._cursor(bump)) for c, r in chosen]
        self._say("updated", f"# updated {[self._label(r) for r in done]}")
        self._observe({self.source.key_of(r) for r in done} if self.config.keyed else set())

    @precondition(lambda self: self.config.soft_deletes)
    @rule(picks=PICKS, bump=BUMPS, everything=st.booleans())
    def soft_delete(self, picks: list[int], bump: int, everything: bool) -> None:
        rows = [(c, r) for c, r in self._free_rows() if not r[DELETED]]
        if not rows:
            return
        chosen = rows if everything else self._pick(rows, picks)
        done = [
            self.source.update(self._where(c, r), self._cursor(bump), deleted=True)
            for c, r in chosen
        ]
        self._say("soft-deleted", f"# soft-deleted {[self._label(r) for r in done]}")
        self._observe({self.source.key_of(r) for r in done})

    @rule(picks=PICKS, everything=st.booleans())
    def hard_delete(self, picks: list[int], everything: bool) -> None:
        rows = self._free_rows()
        if not rows:
            return
        chosen = rows if everything else self._pick(rows, picks)
        for ref, row in chosen:
            self.source.delete(self._where(ref, row))
        self._say("deleted", f"# deleted {[self._label(r) for _, r in chosen]}")
        self._observe()

    @precondition(lambda self: self.config.keyed)
    @rule(pick=st.integers(0, 99), bump=BUMPS)
    def restore_row(self, pick: int, bump: int) -> None:
        """Insert a key again after it was hard-deleted."""
        live = {self.source.key_of(r) for _, r in self.source.live_rows()}
        gone = sorted(set(self.reference.ever) - live - self._locked())
        if not gone:
            return
        key = gone[pick % len(gone)]
        # Its key columns as it had them (id and k2, whichever the key is made of).
        version = dict(next(iter(self.reference.ever[key])))
        row = self.source.insert(self._cursor(bump), {c: version[c] for c in ("id", "k2")})
        self._say("restored", f"# restored {self._label(row)}")
        self._observe({key})

    @precondition(lambda self: not self.config.keyed)
    @rule(pick=st.integers(0, 99), copies=st.integers(1, 2))
    def duplicate_row(self, pick: int, copies: int) -> None:
        """Identical rows in a keyless table: copies of a row, at the frontier's cursor value."""
        rows = self.source.live_rows()
        frontier = self.reference.frontier
        if not rows or frontier is None:
            return
        order = self.reference.order
        tied = [(c, r) for c, r in rows if order(r[CURSOR]) == order(frontier)] or rows
        ref, row = tied[pick % len(tied)]
        copied = [self.source.duplicate(ref, self._cursor(0)) for _ in range(copies)]
        self._say("copied", f"# copied {self._label(row)} {copies}x as {self._label(copied[0])}")
        self._observe()

    # -- transactions left open --------------------------------------------------------------

    @precondition(
        lambda self: self.config.late_commits and len(self.writers) < 2 and self.source.TRANSACTIONS
    )
    @rule(inserts=st.integers(0, 3), picks=st.lists(st.integers(0, 99), max_size=2))
    def open_transaction(self, inserts: int, picks: list[int]) -> None:
        """A writer whose rows commit later, below a cursor that may have moved past their
        values."""
        writer = self.source.open_writer()
        self.writers.append(writer)
        self.dirty = True
        # Time cursors: stamped with the transaction's start (the cap protects them); others: the
        # frontier's value, which later writes leave behind (a lookback covers them).
        cursor = self._cursor(1 if self.config.time_cursor else 0, in_transaction=True)
        done = []
        for _ in range(max(inserts, 0 if picks and self.config.keyed else 1)):
            done.append(self.source.insert(cursor, conn=writer.conn))
        if self.config.keyed:
            rows = self._free_rows()
            for pick in picks:
                if rows:
                    ref, row = rows.pop(pick % len(rows))
                    done.append(self.source.update(self._where(ref, row), cursor, writer.conn))
        for row in done:
            if self.config.keyed:
                writer.keys.add(self.source.key_of(row))
            if not self.config.time_cursor:
                writer.explicit.append(row[CURSOR])
        self._say(
            "opened",
            f"# transaction open since {_short(writer.started)}: {[self._label(r) for r in done]}",
        )

    @precondition(lambda self: bool(self.writers))
    @rule(which=st.integers(0, 1))
    def commit_transaction(self, which: int) -> None:
        self._commit(self.writers[which % len(self.writers)])

    def _commit(self, writer: LateWriter) -> None:
        """Commit, unless its explicit values fell behind the lookback (no guarantee covers
        that)."""
        self.writers.remove(writer)
        stored = self.reference.stored
        if writer.explicit and stored is not None:
            lowest = minus_lookback(self.config, stored)
            if min(writer.explicit) < lowest:
                writer.conn.rollback()
                writer.conn.close()
                self._say(
                    "rolled back",
                    f"# rolled back: its values {list(map(_short, writer.explicit))} "
                    f"fell below the lookback ({_short(lowest)})",
                )
                return
        writer.conn.commit()
        writer.conn.close()
        self._say("committed", f"# committed the transaction open since {_short(writer.started)}")
        self._observe(writer.keys)

    # -- schema changes ----------------------------------------------------------------------

    def _can_change_schema(self) -> bool:
        return not self.writers and self.schema_changes < self.env.schema_changes

    @precondition(lambda self: self._can_change_schema())
    @rule(default=st.booleans())
    def add_column(self, default: bool) -> None:
        self.schema_changes += 1
        self._say("added", f"# added {self.source.add_column(default)}")
        self._observe()

    @precondition(lambda self: self._can_change_schema() and bool(self.source.droppable()))
    @rule(pick=st.integers(0, 99))
    def drop_column(self, pick: int) -> None:
        self.schema_changes += 1
        columns = self.source.droppable()
        name = columns[pick % len(columns)]
        self.source.drop_column(name)
        self._say("dropped", f"# dropped {name}")
        self._observe()

    @precondition(
        lambda self: self._can_change_schema() and bool(self.source.widenable(keys=False))
    )
    @rule(pick=st.integers(0, 99))
    def widen_column(self, pick: int) -> None:
        self.schema_changes += 1
        columns = self.source.widenable(keys=False)
        name, kind = columns[pick % len(columns)]
        self.source.retype(name, kind)
        self._say("widened", f"# widened {name} to {kind}")
        self._observe()

    @precondition(lambda self: self._can_change_schema() and bool(self.source.widenable(keys=True)))
    @rule(pick=st.integers(0, 99))
    def widen_key(self, pick: int) -> None:
        self.schema_changes += 1
        columns = self.source.widenable(keys=True)
        name, kind = columns[pick % len(columns)]
        self.source.retype(name, kind)
        self._say("widened key", f"# widened key column {name} to {kind}")
        self._observe()

    # -- runs refused by design --------------------------------------------------------------

    def _can_refuse(self) -> bool:
        return not self.writers and not self.after_kill and self.refusals < self.env.refusals

    @precondition(lambda self: self._can_refuse() and self.source.narrower("qty") is not None)
    @rule()
    def narrow_column(self) -> None:
        """Narrow qty: an incremental run is refused while the lake holds it wider; a full
        refresh then rebuilds the table."""
        self.refusals += 1
        narrower = self.source.narrower("qty")
        assert narrower is not None
        lake = self._lake()
        held = lake.types.get("qty")  # None without a table (Iceberg: a table without rows has it)
        refused = (
            self.reference.full_refresh_expected(False, lake.holds_rows) == {False}
            and "qty" in self.config.visible(list(self.source.columns()))
            and held in _INT_WIDTH
            and _INT_WIDTH[held]
            > _INT_WIDTH[as_read(self.env.lake_format, self.source.lake_type(narrower))]
        )
        self.source.retype("qty", narrower)
        self._say(
            "narrowed",
            f"# narrowed qty to {narrower}; the lake holds {held}: "
            f"{'refused' if refused else 'allowed'}",
        )
        self._observe()
        if refused:
            self._expect_refusal("qty narrowed in the source", ["'qty'"])
            self._run(full_refresh=True)
        else:
            self._run()

    @precondition(lambda self: self._can_refuse() and self.config.listed is None)
    @rule(pick=st.integers(0, 99))
    def hide_column(self, pick: int) -> None:
        """The cursor or a key column disappears (renamed away): refused; then it comes back.

        A key the config leaves unnamed is the database's: renaming its column changes the key,
        which the next run reads whole (a full refresh), so only a named key's column is hidden.
        """
        self.refusals += 1
        named_key = self.config.key if self.config.key_named != "unnamed" else ()
        columns = [CURSOR, *named_key]
        name = columns[pick % len(columns)]
        self.source.rename(name, f"{name}_gone")
        self._say("renamed", f"# renamed {name} away")
        try:
            self._expect_refusal(f"{name} renamed away in the source", [f"'{name}'"])
        finally:
            self.source.rename(f"{name}_gone", name)

    def _expect_refusal(
        self, what: str, named: Sequence[str], full_refresh: bool = False, unread: bool = False
    ) -> None:
        """The run (`full_refresh`: a full refresh) fails with one paragraph naming the table and
        each of `named`, and changes neither the lake nor the cursor, nor records anything;
        `unread`: refused before it reads the source (`_unread`)."""
        lake, recorded, count = (
            self._lake(),
            self.runner.recorded_cursor(),
            self.runner.materializations(),
        )
        problems = []
        if unread:
            outcome, read = self._unread(lambda: self.runner.run(full_refresh))
            if read:
                problems.append("the run queried the source table before it was refused")
        else:
            outcome = self.runner.run(full_refresh)
        if outcome.timed_out:
            self._fail(f"{self._failed(outcome)} (expected a refusal)", [outcome.describe()])
        message = (outcome.failure or "").strip()
        missing = [text for text in [f"Table '{TABLE}'", *named] if text not in message]
        if outcome.success:
            md = outcome.metadata
            problems.append(
                f"the run succeeded: full_refresh {md.get('full_refresh')}, cursor "
                f"{md.get('previous_cursor')} -> {md.get('cursor')}, {md.get('rows_written')} "
                "rows written"
            )
        elif missing or "\n\n" in message:
            problems.append(
                f"the message should be one paragraph naming {missing or 'the table'}: {message!r}"
            )
        after = self._lake()
        if not after.unchanged(lake):
            problems.append(
                f"the lake changed: snapshot {lake.snapshot} -> {after.snapshot}, files "
                f"{lake.files} -> {after.files}"
            )
        if after.snapshots - lake.snapshots or after.branches - lake.branches:
            problems.append(
                f"the run made snapshots {sorted(after.snapshots - lake.snapshots)}, branches "
                f"{sorted(after.branches - lake.branches)}"
            )
        if self.runner.materializations() != count:
            problems.append("a materialization was recorded")
        if self.runner.recorded_cursor() != recorded:
            problems.append(f"the cursor moved: {recorded} -> {self.runner.recorded_cursor()}")
        if problems:
            self._fail(f"a run after {what} was not refused cleanly", problems)
        kind = "full refresh refused" if full_refresh else "refused"
        self._say(kind, f"# {kind}: {message[:200]}")

    def _unread(self, run: Callable[[], Outcome]) -> tuple[Outcome, bool]:
        """`run` while the source table is locked (no transaction may be open): whether a query
        of the run's waited on the lock, which is then released so the run goes on."""
        release = self.source.lock()
        done, waited = threading.Event(), threading.Event()
        released = threading.Lock()
        freed = [False]

        def free() -> None:
            with released:
                if not freed[0]:
                    freed[0] = True
                    release()

        def watch() -> None:
            while not done.wait(0.2):
                if self.source.reader_waiting():
                    waited.set()
                    free()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            outcome = run()
        finally:
            done.set()
            watcher.join(timeout=30)
            free()
        return outcome, waited.is_set()

    def _refused_until_rebuilt(self, what: str, named: Sequence[str], new_row: bool) -> None:
        """A run is refused with nothing new, then (`new_row`) with a row that is; a full
        refresh then rebuilds the lake from the source."""
        self._expect_refusal(what, named)
        if new_row:
            self.add_row()
            self._expect_refusal(f"{what}, with a new row", named)
        self._run(full_refresh=True)

    # -- settings changed between runs -------------------------------------------------------

    def _can_change_settings(self) -> bool:
        """After a run recorded its settings (there is nothing to change before), as often as
        the budget allows."""
        return (
            not self.after_kill
            and self.settings_changes < self.env.settings_changes
            and self.reference.recorded_settings is not None
        )

    def _reconfigure(self, config: TableConfig, kind: str, what: str) -> None:
        """Run from now on under `config`; the reference learns it with the lake as it is."""
        self.settings_changes += 1
        self.reference.change_settings(config, self._lake())
        self.config = self.source.config = config
        self.runner.configure(config.table_entry(self.source.schema), self._lake_options())
        self._say(kind, f"# settings: {what}")
        self._observe()

    @precondition(lambda self: self._can_change_settings())
    @rule(mode=st.sampled_from(MODES), new_row=st.booleans())
    def change_mode(self, mode: str, new_row: bool) -> None:
        """`mode` changed. While the lake is in the other mode's layout (plain Parquet: holds
        files of it, batches or buckets; Iceberg: its head snapshot says so, rows or none), an
        incremental run is refused naming 'mode', whether or not a row is new, until a full
        refresh rebuilds it; full_refresh mode replaces the table on every run anyway."""
        if mode == self.config.mode or mode not in self.env.modes:
            return
        if mode == "merge" and not self.config.keyed:
            return
        merge = mode == "merge"
        # Only merge deletes rows, and only a merge may read its key from the table's own.
        config = replace(
            self.config,
            mode=mode,
            reconcile=self.config.reconcile and merge,
            soft_deletes=self.config.soft_deletes and merge,
            key_named=self.config.key_named if merge else "as drawn",
        )
        lake = self._lake()
        held = sorted(lake.layouts)
        self._reconfigure(config, "mode changed", f"mode {mode}; the lake's layout: {held}")
        foreign = "batches" if merge else "merge"
        incremental = self.reference.full_refresh_expected(False, True) == {False}
        behind = self.lake_behind
        if mode != "full_refresh" and incremental and (behind or foreign in lake.layouts):
            # A lake removed, moved or restored while full_refresh mode replaced it on every run
            # is refused once the table is incremental again; the lake is checked before its
            # layout, and both refusals name the fix.
            named = [f"run {TABLE} --full"] if behind else ["field 'mode'"]
            self._refused_until_rebuilt(f"mode changed to {mode}", named, new_row)

    @precondition(lambda self: self._can_change_settings() and self.config.mode == "merge")
    @rule()
    def toggle_delete_column(self) -> None:
        """`delete_column` set (with the flag column added, if the table has none) or unset:
        the next run reads the table whole when the lake holds files, and the lake then holds
        the keys that are live under the new setting."""
        flagged = not self.config.soft_deletes
        if flagged and DELETED not in self.source.columns():
            if self.writers:
                return  # the ALTER TABLE would wait for their row locks
            self.source.add_delete_flag()
        config = replace(self.config, soft_deletes=flagged)
        setting = f"delete_column {DELETED if flagged else 'unset'}"
        self._reconfigure(config, "delete_column changed", setting)

    @precondition(lambda self: self._can_change_settings())
    @rule(pick=st.integers(0, 99), listing=st.booleans())
    def change_columns(self, pick: int, listing: bool) -> None:
        """One value column read or no longer read, said with `columns:` (`listing`) or with
        `exclude_columns:`. A column no longer read stays in the lake, NULL in rows written since
        (until a full refresh drops it); one read again is added back, NULL in rows written
        while it wasn't."""
        columns = list(self.source.columns())
        # k2 is always read: `recreate_key` may make it a key column.
        values = [c for c in columns if c not in {*self.config.key, "k2", CURSOR, "note", DELETED}]
        if not values:
            return
        name = values[pick % len(values)]
        read = set(self.config.visible(columns)) ^ {name}
        if listing:
            config = replace(self.config, exclude=(), listed=tuple(c for c in columns if c in read))
        else:
            excluded = tuple(c for c in values if c not in read)
            config = replace(self.config, exclude=excluded, listed=None)
        setting = (
            f"columns {list(config.listed or ())}"
            if listing
            else f"exclude_columns {list(config.exclude)}"
        )
        what = f"{name} {'read' if name in read else 'not read'}: {setting}"
        self._reconfigure(config, "columns changed", what)

    @precondition(lambda self: self._can_change_settings() and self.config.mode == "merge")
    @rule(named=st.sampled_from(("as drawn", "reversed", "unnamed")))
    def name_key(self, named: str) -> None:
        """`primary_key` named in another order (the key changed: every row is matched again in
        the same commit, the plain format's buckets hashing the key's columns in order, an Iceberg
        table replaced) or left out (read from the table)."""
        if named == self.config.key_named or (named == "reversed" and len(self.config.key) < 2):
            return
        if named == "unnamed" and not self.source.KEY_FROM_TABLE:
            return  # files carry no key: the config must name one
        config = replace(self.config, key_named=named)
        self._reconfigure(config, "key named", f"primary_key {named}")

    @precondition(
        lambda self: (
            not self.after_kill
            and self.key_changes < self.env.key_changes  # a budget of its own
            and self.reference.recorded_settings is not None
            and self.config.mode == "merge"
            and not self.writers  # their row locks would keep the ALTER TABLE waiting
        )
    )
    @rule(
        pick=st.integers(0, 99),
        named=st.sampled_from(("as drawn", "reversed", "unnamed")),
        flagged=PICKS,
        deleted=PICKS,
    )
    def recreate_key(self, pick: int, named: str, flagged: list[int], deleted: list[int]) -> None:
        """The source's primary key dropped and made anew on other columns or in another order
        (`TableConfig.key_shapes`), the config's `primary_key` following it (as the source has
        it, reversed, or left out: read from the table); then, in the same window, rows
        soft-deleted (with delete_column) and deleted (with deletes: reconcile), and a run. It
        matches every row again by the new key, and the rows the source deleted must be gone
        from the lake after it (`Reference._check_merge`)."""
        self.key_changes += 1
        shapes = [shape for shape in self.config.key_shapes() if shape != self.config.key]
        key = shapes[pick % len(shapes)]
        if (named == "reversed" and len(key) < 2) or (
            named == "unnamed" and not self.source.KEY_FROM_TABLE
        ):
            named = "as drawn"
        self.source.set_primary_key(key)
        config = replace(self.config, key=key, key_named=named)
        self._reconfigure(
            config, "key recreated", f"the source's key recreated on {key}, primary_key {named}"
        )
        if self.config.soft_deletes:
            self.soft_delete(flagged, bump=1, everything=False)
        if self.config.reconcile:
            self.hard_delete(deleted, everything=False)
        self._run()

    @precondition(
        lambda self: (
            self._can_change_settings()
            and not self.writers  # their row locks would keep the RENAME waiting
            and self.config.listed is None  # columns: would name the old column
            and self.reference.stored is not None
            and self.reference.surely_incremental()
        )
    )
    @rule()
    def rename_cursor(self) -> None:
        """The cursor column renamed, and the config following it: refused (the stored cursor
        belongs to the old column) naming 'cursor'; then both are put back."""
        self.settings_changes += 1
        renamed = f"{CURSOR}_renamed"
        entry = self.config.table_entry(self.source.schema)
        self.source.rename(CURSOR, renamed)
        self.runner.configure({**entry, "cursor": {**entry["cursor"], "column": renamed}})
        self._say("cursor renamed", f"# renamed the cursor column to {renamed}, the config too")
        try:
            self._expect_refusal("the cursor column renamed", ["field 'cursor'", f"'{CURSOR}'"])
        finally:
            self.source.rename(renamed, CURSOR)
            self.runner.configure(entry)

    def _lake_options(self) -> dict[str, Any]:
        """The `lake:` settings the example states: the retention maintenance set, and a
        `merge_writes` set on the lake."""
        return {**self.retention, **self.config.lake_entry()}

    @precondition(
        lambda self: (
            self._can_change_settings()
            and self.config.mode == "merge"
            and bool(self.env.merge_writes)
            and not self.lake_behind  # a refusal for the lake itself may come first
        )
    )
    @rule(
        writes=st.sampled_from((None, *MERGE_WRITES)),
        on=st.sampled_from(MERGE_WRITES_ON),
        back=st.sampled_from(V3_WRITES),
        new_row=st.booleans(),
    )
    def change_merge_writes(self, writes: str | None, on: str, back: str, new_row: bool) -> None:
        """`merge_writes` changed (None: unset, position_deletes), on the table or on the lake.
        The rows stay the same; deletion_vectors makes the table format v3 from its next write
        (`Reference._check_format`). position_deletes on a format v3 table is refused, before
        the source is read, naming the setting, by an incremental run (with nothing new, then
        with a new row) and by a full refresh alike; then the setting is put back to one the
        table takes (`back`)."""
        writes = writes if writes is None or writes in self.env.merge_writes else None
        config = replace(
            self.config, merge_writes=writes, merge_writes_on=on if writes is not None else "table"
        )
        if config == self.config:
            return
        lake = self._lake()
        refused = config.writes not in V3_WRITES and lake.exists and lake.format_version == 3
        where = "unset" if writes is None else f"{writes} (on the {config.merge_writes_on})"
        self._reconfigure(
            config,
            "merge_writes changed",
            f"merge_writes {where}; the table is format v{lake.format_version}",
        )
        if not refused:
            return
        what = "merge_writes: position_deletes on a format v3 table"
        named = ["merge_writes"]
        # A locked source would wait for the writers' row locks; files can't be locked.
        unread = not self.writers and self.source.LOCKS
        self._expect_refusal(what, named, unread=unread)
        if new_row:
            self.add_row()
            self._expect_refusal(f"{what}, with a new row", named, unread=unread)
        self._expect_refusal(what, named, full_refresh=True, unread=unread)
        self._reconfigure(
            replace(config, merge_writes=back, merge_writes_on=on),
            "merge_writes changed",
            f"merge_writes {back} (on the {on}), which a format v3 table takes",
        )

    # -- maintenance between runs ------------------------------------------------------------

    def _can_maintain(self) -> bool:
        """An Iceberg table's maintenance, within the budget; after a killed run too, whose
        commit may have landed unrecorded (`kill_then_maintain`)."""
        return (
            self.env.lake_format == "iceberg"
            and self.maintenances < self.env.maintenance
            and not self.lake_behind  # a copied lake's catalog names the original's table
            and self.runs > 0
        )

    @precondition(lambda self: self._can_maintain())
    @rule(keep=KEEP_SNAPSHOTS, run_after=st.booleans())
    def maintain(self, keep: int, run_after: bool) -> None:
        """The Iceberg table's maintenance, as a job of its own runs it between runs, with the
        retention the config now states (`lake.keep_snapshots` `keep`, `keep_snapshots_for` 0:
        the runs' own maintenance keeps to it too) and thresholds that make these small tables
        due for compaction (`lake_events.maintenance_policy`). Readers see the same rows, at
        main and at every recorded snapshot still kept, and snapshots expire only as the
        retention allows (`Reference.check_maintenance`); then (`run_after`) the next run goes
        on from the stored cursor, adding to the table (writing nothing if the source is as the
        last run left it).
        """
        self.maintenances += 1
        keep = keep if keep in self.env.keep_snapshots else min(self.env.keep_snapshots)
        self.retention = {"keep_snapshots": keep, "keep_snapshots_for": "0s"}
        self.runner.configure(self.runner.table, self._lake_options())
        self.reference.retain(keep, timedelta(0))
        before = self._lake()
        if not before.exists:
            self._say("maintained", "# maintenance: no table to maintain")
            return
        done = maintain_table(self.runner, keep)
        after = self._lake()
        tasks = [part.split(":")[0] for part in done.split("; ")] if done else ["nothing due"]
        self._say(
            f"maintained ({', '.join(tasks)})",
            f"# maintenance, keep_snapshots {keep}, keep_snapshots_for 0s: {done or 'nothing due'}"
            f" ({len(before.snapshots)} -> {len(after.snapshots)} snapshots, "
            f"{len(before.files)} -> {len(after.files)} files)",
        )
        problems = self.reference.check_maintenance(before, after)
        for snapshot in sorted(self.reference.recorded_snapshots & after.snapshots):
            try:
                problems += self.reference.check_time_travel(
                    snapshot, rows_at(self.runner.lake, snapshot)
                )
            except Exception as exc:
                problems.append(f"snapshot {snapshot} can't be read: {type(exc).__name__}: {exc}")
        if problems:
            self._fail("maintenance between runs broke the guarantees", problems)
        unchanged = not self.dirty and self.config.safety_lag is None
        self.dirty = True
        if not run_after:
            return
        outcome = self._run()
        if unchanged:
            self._wrote_nothing(
                outcome, "the run after maintenance", "a source as the last run read it"
            )

    def _wrote_nothing(self, outcome: Outcome, what: str, over: str) -> None:
        """An incremental run over rows the lake holds as they are wrote nothing."""
        md = outcome.metadata
        wrote = {k: md.get(k) for k in ("rows_written", "files_written") if md.get(k)}
        if self.config.mode != "full_refresh" and not md.get("full_refresh") and wrote:
            self._fail(what, [f"over {over}, it wrote {wrote}"])

    @precondition(
        lambda self: (
            self.source.MAPS
            and self.config.shapes
            and not self.dirty
            and self.config.safety_lag is None
            and self.runs > 0
        )
    )
    @rule()
    def reorder_maps(self) -> None:
        """Every row written again with its maps' entries in the reverse order, and nothing else
        changed (files: every file replaced by one of another name). The run that follows
        re-reads what its window holds again (ties at the cursor, the lookback) and must find
        those rows the same as the lake's: equal maps in another order are no change, so it
        writes nothing."""
        self.source.reorder_maps()
        self._say("maps reordered", "# every row written again, its maps' entries reversed")
        self._observe()
        self._wrote_nothing(self._run(), "the run after the maps were reordered", "the same rows")

    # -- the lake and the Dagster instance ---------------------------------------------------

    def _can_disturb_lake(self, *kinds: str) -> bool:
        """After a run stored a cursor (before, the next run replaces the table anyway), as
        often as the budget allows."""
        return (
            not self.after_kill
            and self.lake_events < self.env.lake_events
            and self.reference.stored is not None
            and any(kind in self.env.lake_event_kinds for kind in kinds)
        )

    def _keep_copy(self, metadata: dict[str, Any], lake: LakeState) -> None:
        """A copy of the lake as a run left it (`lake`), to restore later: the last `COPIES`
        commits."""
        commit = metadata.get("lake_commit")
        if commit is not None and self._can_disturb_lake("restored", "restored-with-catalog"):
            self.copies.keep(self.runner, commit, lake.format_version)

    def _lake_disturbed(self, kind: str, what: str, new_row: bool, kept: bool = True) -> None:
        """After the lake was removed, moved or restored, an incremental run is refused (with
        nothing new, then with a new row) naming the stored cursor, the lake and the fix; a full
        refresh then rebuilds the lake. A run that replaces the table anyway just runs. `kept`:
        whether the table there is the one runs go on with (`Reference.lake_disturbed`)."""
        self.lake_events += 1
        self._say(kind, f"# {what}")
        self.dirty = True
        lake = self._lake()
        self.reference.lake_disturbed(lake, kept)
        if self.reference.full_refresh_expected(False, lake.holds_rows) != {False}:
            self.lake_behind = True
            return
        self._refused_until_rebuilt(what, refusal_named(self.runner), new_row)

    def _lake_moved(self, lake: Path) -> None:
        self.reference.lake = str(lake)

    @precondition(lambda self: self._can_disturb_lake("copied"))
    @rule(new_row=st.booleans())
    def copy_lake(self, new_row: bool) -> None:
        """The whole lake copied to another place, its catalog with it (`cp -r`, as SQLite
        copies a database), and `lake.path` pointed at the copy; the original stays.

        The plain format names its files relative to the table's folder: the copy is the same
        table, and the next run goes on from the stored cursor (naming the changed `lake`). An
        Iceberg table's metadata names absolute paths: the copied catalog's entry names the
        original's, so a run is refused; the full refresh rebuilds the table in the copy, and
        leaves the original as it was."""
        self.copies.drop()
        was = read_lake_state(self.runner.lake)
        original, target = copy_lake(self.runner)
        self.reference.lake = str(target)
        what = f"the lake copied to {target}, and lake.path changed to it"
        if self.env.lake_format == "iceberg":
            self._lake_disturbed("lake copied", what, new_row, kept=False)
            if not read_lake_state(original).unchanged(was):
                self._fail("rebuilding a copied lake", [f"the original lake at {original} changed"])
            return
        self.lake_events += 1
        self.dirty = True
        self.reference.lake_disturbed(self._lake())
        self._say("lake copied", f"# {what}")

    @precondition(
        lambda self: (
            self._can_disturb_lake("restored", "restored-with-catalog") and bool(self.copies)
        )
    )
    @rule(pick=st.integers(0, 99), with_catalog=st.booleans(), new_row=st.booleans())
    def restore_lake(self, pick: int, with_catalog: bool, new_row: bool) -> None:
        """The table's folder put back from a copy taken after an earlier run, and (Iceberg,
        `with_catalog`) the catalog's file with it; without it, the catalog names the newer
        metadata the folder no longer has."""
        with_catalog = catalog_restored(self.env.lake_event_kinds, with_catalog)
        now = self.runner.latest_metadata().get("lake_commit")
        # A format v3 copy under position_deletes would be refused for that first (and its full
        # refresh too): `change_merge_writes` has that refusal.
        refused = self.config.mode == "merge" and self.config.writes not in V3_WRITES
        older = self.copies.older(now, v3=not refused)
        if not older:
            return
        what = self.copies.restore(self.runner, older[pick % len(older)], with_catalog)
        self._lake_disturbed("lake restored", what, new_row)

    @precondition(lambda self: self._can_disturb_lake("new-instance"))
    @rule()
    def new_instance(self) -> None:
        """A new, empty Dagster instance (a new DAGSTER_HOME) over the existing lake: its first
        run has no stored cursor, so it replaces the table, which then equals the source."""
        self.lake_events += 1
        self.copies.drop()
        self.runner.new_home()
        self.reference.new_instance()
        self.dirty = True
        self._say("new instance", f"# a new Dagster instance at {self.runner.home}")

    # -- the cursor command ------------------------------------------------------------------

    def _can_move_cursor(self) -> bool:
        return self.cursor_commands < self.env.cursor_commands and self.runs > 0

    def _replay_point(self, pick: int) -> tuple[Any, str]:
        """A cursor to replay from: the stored one, or a committed value below it."""
        stored = self.reference.stored
        assert stored is not None
        order = self.reference.order
        committed = {r[CURSOR] for r in self._snapshot().rows}
        values = sorted(
            {v for v in committed if order(v) <= order(stored)} | {stored},
            key=lambda v: (order(v), v),
        )
        value = values[pick % len(values)]
        return value, cursor_text(self.config.cursor_type, value)

    @precondition(lambda self: self._can_move_cursor() and self.reference.stored is not None)
    @rule(pick=st.integers(0, 99))
    def cursor_set(self, pick: int) -> None:
        """Move the cursor back (a replay): to the stored value or a committed value below it."""
        self.cursor_commands += 1
        value, text = self._replay_point(pick)
        code, output = self.runner.cursor_command("set", TABLE, text)
        if code != 0:
            self._fail("incremental-assets cursor set failed", [output])
        self._say("cursor set", f"# cursor set to {text}")
        self.reference.cursor_set(value)
        self.dirty = True

    @precondition(
        lambda self: (
            self._can_move_cursor()
            and not self.writers  # their row locks would keep the table lock waiting
            and self.source.LOCKS
            and self.env.connect is not None
            and self.kills < self.env.kills
            and self.reference.stored is not None
            and self.reference.surely_incremental()
        )
    )
    @rule(pick=st.integers(0, 99), full_refresh=st.booleans())
    def cursor_set_during_run(self, pick: int, full_refresh: bool) -> None:
        """`cursor set` while a run holds the table lock: it must act as if the run came first.

        The run (a subprocess) is held on a table lock in the source after taking the lake's
        lock; the command starts meanwhile, then the source is released.
        """
        self.kills += 1
        self.cursor_commands += 1
        value, text = self._replay_point(pick)
        before = self._lake_before_run()
        self.source.settle()
        snapshot = self._snapshot()
        recorded = self.runner.materializations()
        results: list[tuple[int, str]] = []
        command = threading.Thread(
            target=lambda: results.append(self.runner.cursor_command("set", TABLE, text))
        )
        release = self.source.lock()
        process = self.runner.start(full_refresh)
        try:
            deadline = time.monotonic() + 180
            while not self.source.reader_waiting():
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError("the run never waited for the locked source")
                time.sleep(0.2)
            command.start()
            time.sleep(2)  # the command is now waiting for the run to release the table
        except BaseException:
            self.runner.stop(process)
            raise
        finally:
            release()
        outcome = self.runner.finish(process, recorded)
        command.join(timeout=120)
        if not outcome.success:
            self._fail(self._failed(outcome), [outcome.describe()])
        self._check(outcome, snapshot, full_refresh, before)
        if not results or results[0][0] != 0:
            self._fail("incremental-assets cursor set failed", [str(results)])
        self._say("cursor set", f"# cursor set to {text}, while that run held the table")
        self.reference.cursor_set(value)
        self.dirty = True

    @precondition(lambda self: self._can_move_cursor())
    @rule()
    def cursor_reset(self) -> None:
        self.cursor_commands += 1
        code, output = self.runner.cursor_command("reset", TABLE)
        if code != 0:
            self._fail("incremental-assets cursor reset failed", [output])
        self.reference.cursor_reset()
        self.dirty = True
        self._say("cursor reset", "# cursor reset")

    # -- runs --------------------------------------------------------------------------------

    @precondition(lambda self: self.dirty)
    @rule(cli=st.booleans())
    def run(self, cli: bool = False) -> None:
        """A run, in this process or (`cli`, within the budget) as `dagster asset materialize`."""
        self._run(cli=cli)

    @precondition(lambda self: self.dirty)
    @rule(cli=st.booleans())
    def full_refresh_run(self, cli: bool = False) -> None:
        self._run(full_refresh=True, cli=cli)

    def _can_kill(self) -> bool:
        return self.dirty and self.env.connect is not None and self.kills < self.env.kills

    @precondition(lambda self: self._can_kill())
    @rule(point=st.sampled_from(PAUSE_POINTS), full_refresh=st.booleans())
    def killed_run(self, point: str, full_refresh: bool) -> None:
        """`dagster asset materialize` killed with SIGKILL at a pause point; the next run
        recovers."""
        self._kill(point, full_refresh)

    def _kill(self, point: str, full_refresh: bool) -> bool:
        """A killed run; whether it reached `point` and was killed there (a run with nothing to
        commit may end first: then it is checked as the run it was)."""
        self.kills += 1
        before = self._lake_before_run()
        self.source.settle()
        snapshot = self._snapshot()
        outcome = self.runner.killed_run(point, full_refresh)
        if outcome.killed:
            self._say("killed", f"# killed at {point}")
            holds_rows = None if before.lake is None else before.lake.holds_rows
            # Committed: past the commit, or (plain Parquet) with its journal written, which the
            # next run rolls forward. An Iceberg run killed before main moved to its branch (or
            # before its CREATE OR REPLACE) committed nothing: main is as it was, and its branch
            # stays (no one drops a branch under a day old).
            committed = point == "committed" or (
                point == "mid-commit" and self.env.lake_format == "parquet"
            )
            self.reference.killed(full_refresh, committed, holds_rows)
            if committed and self.env.lake_format == "iceberg":
                # Main moved: the next run's expiry counts it. The run's own maintenance (after
                # its commit) may have expired snapshots, under the retention of that moment.
                lake = self._lake()
                self.reference.saw(lake)
                problems = self.reference.expired_early(lake)
                if problems:
                    self._fail(f"a run killed at {point}, past its commit", problems)
            self.dirty = True
            self.after_kill = self.after_kill or committed
            self.killed_at = point
            return True
        if not outcome.success:
            what = self._failed(outcome) if outcome.timed_out else "the subprocess run failed"
            self._fail(what, [outcome.describe()])
        self._say("not killed", f"# the run finished before reaching {point}")
        self._check(outcome, snapshot, full_refresh, before)
        return False

    @precondition(
        lambda self: self.env.lake_format == "iceberg" and self._can_kill() and self._can_maintain()
    )
    @rule(keep=KEEP_SNAPSHOTS)
    def kill_then_maintain(self, keep: int) -> None:
        """A new row, and a run killed at `committed`: its commit landed, its materialization was
        never recorded. Then the table's maintenance, with thresholds that make compaction due,
        and the next run, which must recover: it runs the unrecorded batch again, over the
        compacted files (`maintain`)."""
        self.add_row()
        if self._kill("committed", full_refresh=False):
            self.did["maintained after a kill"] += 1
            self.maintain(keep, run_after=True)

    @precondition(lambda self: self.dirty or bool(self.writers))
    @rule()
    def settle(self) -> None:
        """Commit every open transaction, let safety_lag pass, run twice: the lake is complete."""
        for writer in list(self.writers):
            self._commit(writer)
        if self.config.safety_lag:
            time.sleep(lag(self.config).total_seconds() + 0.2)
        self._run(lag_elapsed=True)
        second = self._run(lag_elapsed=True)
        problems = self.reference.check_settled(self._snapshot(), self._lake())
        md = second.metadata
        if self.config.mode != "full_refresh" and not md.get("full_refresh"):
            changed = {
                k: md.get(k)
                for k in (
                    "rows_written",
                    "rows_inserted",
                    "rows_updated",
                    "rows_deleted",
                    "files_written",
                )
                if md.get(k)
            }
            if changed:
                problems.append(f"a second run over an unchanged source still wrote: {changed}")
        if problems:
            self._fail("after settling", problems)


def _short(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%H:%M:%S.%f")
    return str(value)


def machine_class(env: Env) -> type[LakeMachine]:
    """The machine for `env`: its examples draw tables of `env.modes` only (an Iceberg merge
    table's `merge_writes` from `env.merge_writes`)."""

    class Machine(LakeMachine):
        pass

    Machine.env = env
    writes = env.merge_writes if env.lake_format == "iceberg" else ()
    configs = table_configs(
        env.modes, env.database, env.cursor_types, env.key_types, writes, env.shapes
    )
    Machine.setup = initialize(config=configs)(LakeMachine.setup)  # type: ignore[method-assign]
    Machine.__name__ = Machine.__qualname__ = "LakeMachine"
    return Machine


def run_machine(env: Env, *, seed_value: int, examples: int, steps: int, shrink: bool) -> None:
    """`examples` random sequences of `steps` steps each, reproducible from `seed_value`."""
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(
        seed(seed_value)(machine_class(env)),
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
