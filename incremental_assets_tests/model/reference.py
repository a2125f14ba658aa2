"""The reference model: what the lake and a run's metadata must be, given the source's history.

The machine feeds it every committed source state it produces (`observe`), every cursor operation,
and every successful run with the lake read back afterwards (`check_run`). It never asks the
product how anything is computed; it states the README's guarantees over the source's history:

* a run reads every committed row with `lower <= cursor <= R`, where R is the cursor it records
  and `lower` the stored cursor minus the lookback (nothing below it on a full refresh);
* R is the largest committed cursor value in that window that lies below the start of every
  open transaction (time cursors), and never below the stored cursor on an incremental run;
* merge: one row per key, the latest version; soft-deleted keys gone; hard-deleted keys gone
  once reconciled (`deletes: reconcile` reconciles every run that doesn't replace the table,
  the run whose key changed included); a key whose version lies above R keeps what the lake
  held; when the key changes, what the model remembers is re-keyed by it;
* append: every version read, once: a version is (key, cursor), or the whole row without a key
  (a multiset: identical rows count);
* full_refresh mode: the lake is the committed snapshot;
* the metadata agrees with the lake (row count, inserted/updated/deleted, rows written);
* settings: the config may change between runs (`change_settings`). The first run that succeeds
  after a change names exactly the lake-shaping settings that differ from the last recorded
  run's (`settings_changed`) and never proves "nothing new" without Spark; a merge whose
  `delete_column` changed reads the table whole (when the lake holds files) and says why. The
  reference then checks the lake against the new settings (columns a run doesn't read are as
  if the source had dropped them). A new Dagster instance (`new_instance`) has no stored cursor;
* readers can read the lake, and it holds no leftovers of a run: nothing in the plain format's
  _journal/ or _staging/ (an Iceberg table's folder never has them), no branch of a run that
  succeeded (`ia-<commit id>`: a killed run's stays, until a later commit a day on), and no file
  in an Iceberg table's data/ that none of its kept snapshots references (but those a lake event
  left: a table rebuilt over a copy keeps the copy's files);
* Iceberg: the snapshot a run records is main's after it (or main's head, when only compactions
  followed it); a run that writes nothing (and changes no column) commits no snapshot, one that
  writes files moves main's head; every snapshot a run recorded stays readable, as it was, until
  the retention allows it to expire (`lake.keep_snapshots`, `lake.keep_snapshots_for`: at least
  that many of main's snapshots newer than it, and older than that; at the default day, none
  does here), and main's head never expires; no file a kept snapshot references is deleted;
* Iceberg merge tables, `merge_writes` (`TableConfig.writes`): the rows are the same whatever it
  says. The table is format v3 once a merge under deletion_vectors committed (a run with Spark
  that commits nothing may have raised it already), and never goes back (a table made anew, as
  after a lake event, starts again); a merge's snapshot adds deletion vectors only under
  deletion_vectors, position-delete files only under position_deletes, and no delete file under
  copy_on_write; a table replaced whole holds no delete file. position_deletes on a v3 table is
  refused before the source is read (`LakeMachine.change_merge_writes`);
* Iceberg maintenance run between runs (`check_maintenance`): readers see the same rows and
  columns, at main and at every kept recorded snapshot; main's head, the format version and the
  branches stay; snapshots expire only as the retention allows; no file goes missing or orphaned;
* after a full refresh the lake's columns are the source's (Iceberg's older snapshots keep theirs).

Cursor values and keys are compared as the source database compares them (`collated`: on
MariaDB, text that differs only in case or trailing spaces is equal); the values the lake holds
are compared exactly, arrays in order, maps as their sets of entries (`frozen`, `lake.held`).
A version of a keyless or append row is its exact values.

Violations are collected, not raised one by one, so a failure shows everything that went wrong.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa

from incremental_assets_tests.model.lake import DATA, POSITIONS, VECTOR, LakeState
from incremental_assets_tests.model.source import Key, Row, Snapshot
from incremental_assets_tests.model.table import (
    CURSOR,
    DELETED,
    CursorValue,
    TableConfig,
    collated,
    minus_lookback,
    parse_recorded,
)

Frozen = tuple[tuple[str, Any], ...]


def freeze(row: Mapping[str, Any]) -> Frozen:
    return tuple(sorted(row.items()))


def project(row: Mapping[str, Any] | Frozen, columns: Sequence[str]) -> tuple[Any, ...]:
    values = dict(row)
    return tuple(values.get(c) for c in columns)


@dataclass(frozen=True)
class RunFacts:
    """What the machine knows about one successful run, besides the lake."""

    metadata: Mapping[str, Any]
    snapshot: Snapshot  # the committed source while the run read it
    full_requested: bool
    open_starts: tuple[datetime, ...] = ()  # starts of the transactions open during the run
    lag_elapsed: bool = False  # every row is older than safety_lag (the settle step waited)
    lake_rows_before: int | None = None  # None after a killed run: its commit may be in the lake
    # Whether the lake held rows before the run, as a run tells (`LakeState.holds_rows`; None
    # after a killed run: can't tell).
    lake_held_rows_before: bool | None = None
    head_before: int | None = None  # Iceberg: main's head before the run (if known)
    # Iceberg: the runs' branches before the run (None: not read, after a killed run).
    branches_before: frozenset[str] | None = None
    defaulted: frozenset[str] = frozenset()  # columns added with a DEFAULT


@dataclass
class Reference:
    config: TableConfig
    frontier: CursorValue | None = None  # the largest cursor value ever committed
    stored: CursorValue | None = None  # where the next run starts (None: from scratch)
    # A killed full refresh committed: the next run repeats it (None: the killed run may or may
    # not have been one).
    repeat_full: bool | None = False
    lake: str = ""  # where the config puts the lake (`lake.path`)
    # The lake-shaping settings of the last recorded run (None: no run recorded any).
    recorded_settings: dict[str, Any] | None = None
    ever: dict[Key, set[Frozen]] = field(default_factory=lambda: defaultdict(set))
    # merge: the versions of each key's current row since it was last written (a schema change
    # alters rows without moving their cursor, and the lake may keep their older form)
    current: dict[Key, set[Frozen]] = field(default_factory=dict)
    prev_lake: dict[Key, Row] | None = None  # merge: the lake after the last checked run
    prev_columns: set[str] = field(default_factory=set)
    types_seen: dict[str, set[pa.DataType]] = field(default_factory=lambda: defaultdict(set))
    # append: the rows each run read since the table was last replaced
    reads: list[list[Row]] = field(default_factory=list)
    runs: int = 0
    # Iceberg: the snapshots runs recorded since the lake was last disturbed (each stays until
    # the retention allows it to expire), with the rows the lake held as each was recorded, and
    # the files a lake event left in the table's data/ (a copy's, a moved table's).
    recorded_snapshots: set[int] = field(default_factory=set)
    recorded_rows: dict[int, Counter[Frozen]] = field(default_factory=dict)
    inherited_files: frozenset[str] = frozenset()
    # Iceberg: how long snapshots are kept (`lake.keep_snapshots`, `lake.keep_snapshots_for`),
    # and every snapshot seen since the lake was last disturbed, by its sequence number (the
    # order of the table's commits), with those that were ever main's (its ancestry): a snapshot
    # may expire once `keep_snapshots` of those are newer than it (and it is older than
    # `keep_snapshots_for`).
    keep_snapshots: int = 100
    keep_snapshots_for: timedelta = timedelta(days=1)
    sequence: dict[int, int] = field(default_factory=dict)
    mains: set[int] = field(default_factory=set)
    # Iceberg: the table's format version after the last run (0: no table a run keeps; None:
    # can't tell, after a killed run or a lake copied with its catalog).
    format_version: int | None = 0

    # -- the source --------------------------------------------------------------------------

    def observe(self, snapshot: Snapshot, written: Iterable[Key] = ()) -> None:
        """A committed state of the source; `written` are the keys the step wrote."""
        rewritten = set(written)
        for name, lake_type in snapshot.lake_types.items():
            self.types_seen[name].add(lake_type)
        for row in snapshot.rows:
            cursor = row[CURSOR]
            if self.frontier is None or self.order(cursor) > self.order(self.frontier):
                self.frontier = cursor
        if not self.config.keyed:
            return
        present = set()
        for row in snapshot.rows:
            key = self.key(row)
            present.add(key)
            self.ever[key].add(freeze(row))
            if key in rewritten or key not in self.current:
                self.current[key] = {freeze(row)}
            else:
                self.current[key].add(freeze(row))
        for key in list(self.current):
            if key not in present:
                del self.current[key]

    def key(self, row: Mapping[str, Any]) -> Key:
        """The row's key as the source compares keys (`SourceTable.key_of`)."""
        return tuple(collated(self.config, row[c]) for c in self.config.key)

    def order(self, value: CursorValue) -> Any:
        """A cursor value as the source orders and equates it."""
        return collated(self.config, value)

    def within(
        self, value: CursorValue, lower: CursorValue | None, upper: CursorValue | None
    ) -> bool:
        """lower <= value <= upper in the source's order (no upper: nothing is)."""
        order = self.order
        return (
            upper is not None
            and order(value) <= order(upper)
            and (lower is None or order(value) >= order(lower))
        )

    # -- cursor operations -------------------------------------------------------------------

    def cursor_set(self, value: CursorValue) -> None:
        self.stored = value

    def cursor_reset(self) -> None:
        self.stored = None

    def killed(self, full_refresh: bool, committed: bool, holds_rows: bool | None) -> None:
        """A run killed at a pause point recorded nothing; a committed full refresh is repeated.
        Killed after setting the table's properties, it may have raised the format version."""
        self.format_version = None
        if not committed:
            return
        full = self.full_refresh_expected(full_refresh, holds_rows)
        if full == {True}:
            self.repeat_full = True
        elif True in full:
            self.repeat_full = None
        self.prev_lake = None  # its commit is in the lake: compare with history instead

    def retain(self, keep: int, keep_for: timedelta) -> None:
        """Snapshots are kept by this retention from now on (the config says so)."""
        self.keep_snapshots, self.keep_snapshots_for = keep, keep_for

    def full_refresh_expected(self, requested: bool, holds_rows: bool | None) -> set[bool]:
        """What the next run's `full_refresh` may be: it replaces the table when asked, in
        full_refresh mode, without a stored cursor, to repeat a full refresh a killed run
        committed, or (merge) when delete_column changed and the lake holds rows. Both where
        the model can't tell (`holds_rows` None: after a killed run)."""
        if requested or self.config.mode == "full_refresh" or self.stored is None:
            return {True}
        if self.repeat_full is not False:
            return {True} if self.repeat_full else {True, False}
        if self.config.mode == "merge" and "delete_column" in self.pending_settings():
            return {True, False} if holds_rows is None else {holds_rows}
        return {False}

    def surely_incremental(self) -> bool:
        """Whether the next run adds to the lake rather than replacing it, whether or not the
        lake holds rows."""
        return all(self.full_refresh_expected(False, rows) == {False} for rows in (True, False))

    # -- settings and instances --------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {**self.config.lake_settings(), "lake": self.lake}

    def pending_settings(self) -> set[str]:
        """The settings that differ from the last recorded run's: the next run names them (one the
        record lacks is not compared: `settings.changed_settings`)."""
        if self.recorded_settings is None:
            return set()
        now, then = self.settings(), self.recorded_settings
        return {name for name in then if now.get(name) != then[name]}

    def change_settings(self, config: TableConfig, lake: LakeState) -> None:
        """The config is now `config`; `lake` is what the lake holds. A mode's memory of the lake
        starts from it: a merge matches its rows by key, an append adds to its rows. A new key
        (the source's recreated) re-keys what the model remembers by key."""
        was = self.config
        self.config = config
        if config.mode != was.mode and config.mode == "merge":
            self.prev_lake = {self.key(row): row for row in lake.rows}
        if config.mode != was.mode and config.mode == "append":
            self.reads = [list(lake.rows)]
        if config.key != was.key:
            self._rekey()

    def _rekey(self) -> None:
        """Every version, current row and lake row the model keeps, under the key the config now
        has: each row holds every key column, and a row's k2 never changes."""
        ever: dict[Key, set[Frozen]] = defaultdict(set)
        for versions in self.ever.values():
            for version in versions:
                ever[self.key(dict(version))].add(version)
        self.ever = ever
        self.current = {self.key(dict(next(iter(v)))): v for v in self.current.values()}
        if self.prev_lake is not None:
            self.prev_lake = {self.key(row): row for row in self.prev_lake.values()}

    def new_instance(self) -> None:
        """A new, empty Dagster instance over the same lake: nothing stored, nothing recorded."""
        self.stored = None
        self.repeat_full = False
        self.recorded_settings = None

    def lake_disturbed(self, lake: LakeState, kept: bool = True) -> None:
        """The lake was removed, moved, copied or restored: `lake` is what its place holds now.
        Snapshots recorded before may be gone, and the files there are the event's. `kept`:
        whether a run goes on with the table there (a lake copied with its catalog is rebuilt
        anew, whatever the copied table's format)."""
        self.recorded_snapshots = set()
        self.recorded_rows = {}
        self.sequence, self.mains = {}, set()
        self.inherited_files = lake.on_disk
        self.format_version = (lake.format_version or 0) if kept and lake.exists else 0
        if not kept:
            self.format_version = None

    def saw(self, lake: LakeState) -> None:
        """The Iceberg lake as read: its snapshots' order, and those that are main's (or were:
        the snapshot log keeps the history a full refresh replaced)."""
        self.sequence.update(lake.sequence)
        self.mains.update(lake.ancestry, lake.main_history)

    def may_expire(self, snapshot: int) -> bool:
        """Whether the retention lets `snapshot` expire: past `keep_snapshots` newer snapshots
        of main's (`keep_snapshots_for` 0; none expires sooner than a day here otherwise)."""
        if self.keep_snapshots_for > timedelta(0) or snapshot not in self.sequence:
            return False
        at = self.sequence[snapshot]
        newer = sum(1 for s in self.mains if self.sequence.get(s, -1) > at)
        return newer >= self.keep_snapshots

    def retention(self) -> str:
        return (
            f"keep_snapshots {self.keep_snapshots}, keep_snapshots_for "
            f"{self.keep_snapshots_for.total_seconds():g}s"
        )

    def expired_early(self, lake: LakeState) -> list[str]:
        """Recorded snapshots gone from the lake that the retention keeps; forget the others."""
        gone = self.recorded_snapshots - lake.snapshots
        early = sorted(s for s in gone if not self.may_expire(s))
        out = []
        if early:
            newer = {
                s: sorted(
                    t for t in self.mains if self.sequence.get(t, -1) > self.sequence.get(s, 0)
                )
                for s in early
            }
            out.append(
                f"snapshots that runs recorded expired before the retention allows "
                f"({self.retention()}): {early}; main's snapshots newer than each: {newer}"
            )
        self.recorded_snapshots -= gone
        for snapshot in gone:
            self.recorded_rows.pop(snapshot, None)
        return out

    # -- runs --------------------------------------------------------------------------------

    def check_run(self, facts: RunFacts, lake: LakeState) -> list[str]:
        """Every violation of the guarantees by this run and the lake it left; then remember it."""
        kind = self.config.cursor_type
        md = facts.metadata
        out: list[str] = []
        full = bool(md.get("full_refresh"))
        expected_full = self.full_refresh_expected(
            facts.full_requested, facts.lake_held_rows_before
        )
        if full not in expected_full:
            out.append(f"metadata full_refresh is {full}, expected {expected_full.pop()}")
        out += self._check_settings(facts)
        previous = parse_recorded(kind, md.get("previous_cursor"))
        if previous != self.stored:
            out.append(
                f"previous_cursor is {previous!r}, but the run should start from {self.stored!r}"
            )
        recorded = parse_recorded(kind, md.get("cursor"))
        lower = None if full or previous is None else previous
        if lower is not None and self.config.lookback is not None:
            lower = minus_lookback(self.config, lower)
        out += self._check_cursor(facts, full, previous, recorded, lower)
        out += self._check_extracted(facts, full, lower, recorded)
        out += self._check_metadata(facts, lake, full)
        committed = full or bool(md.get("files_written"))
        out += self._check_columns(facts.snapshot, lake, full, committed)
        if self.config.mode == "merge":
            out += self._check_merge(facts, lake, full, recorded)
        elif self.config.mode == "append":
            out += self._check_append(facts, lake, full, lower, recorded)
        else:
            out += self._check_snapshot(facts.snapshot, lake)
        if lake.unreadable:
            out.append(f"the lake can't be read after the run: {lake.unreadable}")
        if lake.schema_mismatches:
            out.append(f"lake files disagree on the schema: {list(lake.schema_mismatches)}")
        out += self._check_batches(facts, lake, full)
        if lake.pending:
            out.append(f"a successful run left {list(lake.pending)} behind")
        if lake.iceberg:
            out += self._check_iceberg(facts, lake, full)
            out += self._check_format(facts, lake, full)
        self.stored = recorded
        self.repeat_full = False
        self.recorded_settings = self.settings()
        self.prev_columns = set(lake.columns)  # an emptied lake keeps no columns
        self.runs += 1
        return out

    def _check_batches(self, facts: RunFacts, lake: LakeState, full: bool) -> list[str]:
        """Each row's `_batch` says which run wrote it: none past the batch the run recorded; a
        full refresh's every row; an append's own rows, as many as it says it wrote (a rerun
        replaces the batch a killed run committed, never adds a second copy of it)."""
        md, out = facts.metadata, []
        batch = md.get("batch")
        if batch is None or not lake.batches:
            return []
        ahead = sorted(b for b in lake.batches if b > batch)
        if ahead:
            out.append(f"the lake holds rows of batches {ahead}, past the run's batch {batch}")
        if full and set(lake.batches) != {batch}:
            out.append(
                f"after a full refresh as batch {batch}, rows by batch: {dict(lake.batches)}"
            )
        written = md.get("rows_written")
        appended = self.config.mode == "append" and not full and written
        if appended and lake.batches[batch] != written:
            out.append(
                f"the run wrote {written} rows as batch {batch}, the lake holds "
                f"{lake.batches[batch]} of that batch"
            )
        return out

    def _check_iceberg(self, facts: RunFacts, lake: LakeState, full: bool) -> list[str]:
        """An Iceberg lake after a run: the snapshot recorded is main's (or its head, if only
        compactions followed); the snapshots runs recorded are kept; main's head moves when the
        run writes and not when it writes nothing; the run leaves no branch, and no file that no
        snapshot references."""
        md, out = facts.metadata, []
        recorded = md.get("iceberg_snapshot_id")
        if recorded not in lake.since_head:
            out.append(
                f"the run recorded snapshot {recorded}, but main is at {lake.snapshot} (its "
                f"head {lake.head})"
            )
        self.saw(lake)
        out += self.expired_early(lake)
        if recorded is not None:
            self.recorded_snapshots.add(int(recorded))
            self.recorded_rows[int(recorded)] = Counter(freeze(row) for row in lake.rows)
        if lake.missing:
            out.append(f"files that kept snapshots reference are gone: {list(lake.missing)}")
        if facts.lake_rows_before is not None:  # main before the run is known
            before = facts.head_before
            # A run that only deleted rows wrote a snapshot too (a table replaced empty: no file).
            silent = not any(
                md.get(k)
                for k in ("rows_written", "files_written", "rows_deleted", "schema_change")
            )
            if not full and silent and lake.head != before:
                out.append(
                    f"a run that wrote nothing moved main's head from snapshot {before} to "
                    f"{lake.head}"
                )
            if (full or md.get("files_written")) and lake.head == before:
                out.append(
                    f"the run wrote {md.get('files_written')} files (full_refresh {full}), but "
                    f"main's head is still snapshot {before}"
                )
        left = {b for b in lake.branches if b == f"ia-{md.get('lake_commit')}"}
        if facts.branches_before is not None:
            left |= lake.branches - facts.branches_before
        if left:
            out.append(f"a successful run left its branch behind: {sorted(left)}")
        orphans = sorted(set(lake.unreferenced) - self.inherited_files)
        if orphans:
            out.append(f"files in the table's folder that no kept snapshot references: {orphans}")
        return out

    def _check_format(self, facts: RunFacts, lake: LakeState, full: bool) -> list[str]:
        """`merge_writes`: the table's format version, and the delete files the run's snapshot
        added (`LakeState.head_added`: the run's own, when it committed one)."""
        if not lake.exists:
            return []
        md, out = facts.metadata, []
        committed = full or bool(md.get("files_written"))
        writes = self.config.writes if self.config.mode == "merge" else None
        raises = writes == "deletion_vectors"
        before = self.format_version
        if raises and committed:
            allowed = {3}
        elif before is None:
            allowed = {2, 3}
        else:
            allowed = {max(2, before), 3} if raises else {max(2, before)}
        if lake.format_version not in allowed:
            was = "unknown" if before is None else (f"v{before}" if before else "no table")
            out.append(
                f"the table is format v{lake.format_version} after a "
                f"{'committing ' if committed else ''}"
                f"run (merge_writes {writes}, the table was {was}), expected "
                f"{' or '.join(f'v{v}' for v in sorted(allowed))}"
            )
        self.format_version = lake.format_version
        if not committed or md.get("iceberg_snapshot_id") != lake.head:
            return out
        added = Counter(kind for _, kind in lake.head_added if kind != DATA)
        if full and added:
            out.append(f"a run that replaced the table added delete files: {dict(added)}")
        wanted = {"position_deletes": POSITIONS, "deletion_vectors": VECTOR}.get(writes or "")
        wrong = {kind: n for kind, n in added.items() if kind != wanted}
        if writes is not None and not full and wrong:
            out.append(
                f"a merge under merge_writes {writes} added {wrong} (it writes "
                f"{'no delete files' if wanted is None else wanted + ' only'})"
            )
        return out

    def check_maintenance(self, before: LakeState, after: LakeState) -> list[str]:
        """The table after maintenance between runs, against the table before it: the same rows
        and columns, head, layout, format version and branches; recorded snapshots expired only
        as the retention allows; no file gone that a kept snapshot references, and none left in
        data/ that no kept snapshot references (expiry deletes what only expired snapshots held).
        """
        self.saw(before)
        self.saw(after)
        out = []
        if Counter(map(freeze, after.rows)) != Counter(map(freeze, before.rows)):
            lost = Counter(map(freeze, before.rows)) - Counter(map(freeze, after.rows))
            found = Counter(map(freeze, after.rows)) - Counter(map(freeze, before.rows))
            out.append(f"the rows changed: lost {dict(lost)}, gained {dict(found)}")
        if after.types != before.types or after.batches != before.batches:
            out.append(
                f"columns or batches changed: {before.types} -> {after.types}, "
                f"{dict(before.batches)} -> {dict(after.batches)}"
            )
        if (after.head, after.layouts) != (before.head, before.layouts):
            out.append(
                f"main's head went from snapshot {before.head} ({sorted(before.layouts)}) to "
                f"{after.head} ({sorted(after.layouts)}): the last commit of ours must stay"
            )
        if after.format_version != before.format_version:
            out.append(f"format v{before.format_version} became v{after.format_version}")
        if after.branches != before.branches:
            out.append(
                f"the branches changed: {sorted(before.branches)} -> {sorted(after.branches)}"
            )
        out += self.expired_early(after)
        if after.missing:
            out.append(f"files that kept snapshots reference are gone: {list(after.missing)}")
        left = sorted(set(after.unreferenced) - set(before.unreferenced) - self.inherited_files)
        if left:
            out.append(f"files in data/ that no kept snapshot references: {left}")
        if after.unreadable:
            out.append(f"the table can't be read: {after.unreadable}")
        return out

    def check_time_travel(self, snapshot: int, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """A kept recorded snapshot reads as the lake did when its run recorded it (on the
        columns both have: a reader's schema may have gained or lost some since)."""
        held = self.recorded_rows.get(snapshot)
        if held is None:
            return []
        then = [dict(row) for row in held.elements()]
        columns = (
            sorted(set().union(*map(set, then)) & set().union(*map(set, rows)))
            if then and rows
            else []
        )
        expected = Counter(project(row, columns) for row in then)
        got = Counter(project(row, columns) for row in rows)
        if expected == got:
            return []
        return [
            f"snapshot {snapshot} reads {sum(got.values())} rows, {dict(got - expected)} of them "
            f"not as recorded; missing {dict(expected - got)} (columns {columns})"
        ]

    def _check_settings(self, facts: RunFacts) -> list[str]:
        """The run names what changed since the last recorded run, and proves nothing without
        Spark then; a merge reading its table whole for a changed delete_column says so."""
        md, out = facts.metadata, []
        changed = self.pending_settings()
        text = md.get("settings_changed") or ""
        named = {part.split(":", 1)[0] for part in text.split("; ")} if text else set()
        if named != changed:
            out.append(
                f"settings_changed is {text!r}, but {sorted(changed) or 'nothing'} changed since "
                "the last recorded run"
            )
        if changed and str(md.get("spark", "")).startswith("not started"):
            out.append(
                f"right after a change of {sorted(changed)}, "
                "the run proved nothing new without Spark"
            )
        reads_whole = (
            "delete_column" in changed
            and self.config.mode == "merge"
            and facts.lake_held_rows_before
            and not facts.full_requested
        )
        if reads_whole and "delete_column changed" not in str(md.get("warnings") or ""):
            out.append(
                f"delete_column changed, but the warnings don't say so: {md.get('warnings')!r}"
            )
        return out

    def _check_cursor(
        self,
        facts: RunFacts,
        full: bool,
        previous: CursorValue | None,
        recorded: CursorValue | None,
        lower: CursorValue | None,
    ) -> list[str]:
        """R is exactly the largest committed value in the window below the transaction cap."""
        out = []
        order = self.order
        backwards = previous is not None and (recorded is None or order(recorded) < order(previous))
        if not full and backwards:
            out.append(f"incremental run moved the cursor backwards: {previous!r} -> {recorded!r}")
        cap = self._cap(facts.open_starts)
        values = [
            row[CURSOR]
            for row in facts.snapshot.rows
            if (lower is None or order(row[CURSOR]) >= order(lower))
            and (cap is None or row[CURSOR] < cap)
        ]
        upper = max(values, key=order) if values else None
        expected = upper if full else self._later(previous, upper)
        if cap is not None and recorded is not None and recorded >= cap:
            out.append(
                f"the cursor {recorded!r} passed the start of an open transaction {cap!r}: "
                "its rows commit below the cursor"
            )
        if self.config.safety_lag is None or facts.lag_elapsed:
            if (None if recorded is None else order(recorded)) != (
                None if expected is None else order(expected)
            ):
                out.append(
                    f"cursor {recorded!r}, expected {expected!r} "
                    "(the largest committed value in the "
                    f"window from {lower!r}{'' if cap is None else f' below the cap {cap!r}'})"
                )
        elif recorded is not None and (expected is None or order(recorded) > order(expected)):
            out.append(
                f"cursor {recorded!r} is above every committed value it may pass ({expected!r})"
            )
        return out

    def _later(self, previous: CursorValue | None, upper: CursorValue | None) -> CursorValue | None:
        if previous is None:
            return upper
        if upper is None:
            return previous
        return max(previous, upper, key=self.order)

    def _check_extracted(
        self,
        facts: RunFacts,
        full: bool,
        lower: CursorValue | None,
        recorded: CursorValue | None,
    ) -> list[str]:
        """The run read exactly the window's rows (a snapshot: those, or the whole table), or
        none when it proved, without Spark, that they are unchanged (metadata `spark`)."""
        rows = facts.snapshot.rows
        expected = {sum(1 for r in rows if self.within(r[CURSOR], lower, recorded))}
        if full:
            expected.add(len(rows))
        if str(facts.metadata.get("spark", "")).startswith("not started"):
            expected = {0}
        extracted = facts.metadata.get("rows_extracted")
        if extracted not in expected:
            return [
                f"rows_extracted is {extracted}, but {sorted(expected)} committed rows lie in the "
                f"window [{lower!r}, {recorded!r}]"
            ]
        return []

    def _cap(self, starts: Sequence[datetime]) -> CursorValue | None:
        """The transaction cap in the cursor's own terms (UTC wall clock for `timestamp`)."""
        if not starts or (not self.config.time_cursor and self.config.cursor_type != "date"):
            return None
        start = min(starts).astimezone(UTC)
        if self.config.cursor_type == "timestamptz":
            return start
        if self.config.cursor_type == "timestamp":
            return start.replace(tzinfo=None)
        return date(start.year, start.month, start.day)

    def _check_metadata(self, facts: RunFacts, lake: LakeState, full: bool) -> list[str]:
        md, out = facts.metadata, []
        count = len(lake.rows)
        if md.get("dagster/row_count") != count:
            out.append(
                f"dagster/row_count is {md.get('dagster/row_count')}, the lake holds {count} rows"
            )
        before = facts.lake_rows_before
        if self.config.mode == "merge":
            inserted, updated, deleted = (
                int(md.get(key) or 0) for key in ("rows_inserted", "rows_updated", "rows_deleted")
            )
            if md.get("rows_written") != inserted + updated:
                out.append(
                    f"rows_written {md.get('rows_written')} != "
                    f"rows_inserted {inserted} + rows_updated {updated}"
                )
            if not full and before is not None and count != before + inserted - deleted:
                out.append(
                    f"the lake went from {before} to {count} rows, "
                    f"but the run says +{inserted} -{deleted}"
                )
        elif (
            self.config.mode == "append"
            and not full
            and before is not None
            and count != before + md.get("rows_written", 0)
        ):
            out.append(
                f"the lake went from {before} to {count} rows, "
                f"but rows_written is {md.get('rows_written')}"
            )
        return out

    def _check_columns(
        self, snapshot: Snapshot, lake: LakeState, full: bool, committed: bool
    ) -> list[str]:
        """Source columns arrive with their types at the next commit; dropped ones stay, until a
        full refresh. (A run that commits nothing leaves the lake's schema as it was.)"""
        if not lake.exists:
            return []
        out = []
        for name, source_type in snapshot.columns.items():
            held = lake.types.get(name)
            if committed and held is None:
                out.append(f"source column {name} ({source_type}) is not in the lake")
            elif committed and held != snapshot.lake_types[name]:
                out.append(f"column {name} is {held} in the lake, {source_type} in the source")
            elif held is not None and held not in self.types_seen[name]:
                out.append(f"column {name} is {held} in the lake, a type it never had")
        extra = set(lake.columns) - set(snapshot.columns)
        if full and extra:
            out.append(f"a full refresh kept columns the source no longer has: {sorted(extra)}")
        lost = self.prev_columns - set(lake.columns)
        if not full and lost:
            out.append(f"an incremental run lost lake columns {sorted(lost)}")
        return out

    # -- modes -------------------------------------------------------------------------------

    def _check_snapshot(self, snapshot: Snapshot, lake: LakeState) -> list[str]:
        """full_refresh mode: the lake is the committed snapshot, row for row."""
        columns = list(snapshot.columns)
        expected = Counter(project(row, columns) for row in snapshot.rows)
        got = Counter(project(row, columns) for row in lake.rows)
        return _multiset_diff("snapshot", columns, expected, got)

    def _check_append(
        self,
        facts: RunFacts,
        lake: LakeState,
        full: bool,
        lower: CursorValue | None,
        recorded: CursorValue | None,
    ) -> list[str]:
        rows = facts.snapshot.rows
        read = [r for r in rows if self.within(r[CURSOR], lower, recorded)]
        out = []
        if full:
            self.reads = []
            read, ahead_note = self._whole_or_bounded_append(rows, read, lake, recorded)
            out += ahead_note
        self.reads.append(read)
        if self.config.keyed:
            return out + self._check_versions(lake)
        return out + self._check_multiset(facts, lake)

    def _whole_or_bounded_append(
        self,
        rows: Sequence[Row],
        read: list[Row],
        lake: LakeState,
        recorded: CursorValue | None,
    ) -> tuple[list[Row], list[str]]:
        """A full refresh loads up to its cursor, or (rows held back above it) everything."""
        ahead = [r for r in rows if not self.within(r[CURSOR], None, recorded)]
        if not ahead:
            return read, []
        in_lake = {freeze({c: r.get(c) for c in lake.columns}) for r in lake.rows}
        held = [r for r in ahead if freeze({c: r.get(c) for c in lake.columns}) in in_lake]
        if not held:
            return read, []
        if len(held) == len(ahead):
            return [*read, *ahead], []
        return read, [
            f"a full refresh loaded {len(held)} of the {len(ahead)} rows above its cursor"
        ]

    def _check_versions(self, lake: LakeState) -> list[str]:
        """append with a key: each (key, cursor) read once, with the values first read.

        A version is the exact values (as the lake compares them): on MariaDB, a row written
        again with its key or cursor respelled is a new version, and is appended.
        """
        expected: dict[tuple[Key, Any], Row] = {}
        for read in self.reads:
            for row in read:
                expected.setdefault(self._version(row), row)
        got: dict[tuple[Key, Any], list[Row]] = defaultdict(list)
        for row in lake.rows:
            got[self._version(row)].append(row)
        out = []
        columns = lake.columns
        for version, copies in sorted(got.items(), key=_order):
            if len(copies) > 1:
                out.append(f"version {version} is in the lake {len(copies)} times")
            if version not in expected:
                known = self.key(copies[0]) in self.ever
                origin = "was never read" if known else "never existed"
                out.append(f"version {version} is in the lake but {origin}: {copies[0]}")
            elif project(copies[0], columns) != project(expected[version], columns):
                out.append(
                    f"version {version} holds {project(copies[0], columns)}, expected "
                    f"{project(expected[version], columns)} (columns {columns})"
                )
        for version in sorted(expected.keys() - got.keys(), key=_order):
            out.append(
                f"version {version} was read (cursor <= the recorded cursor) but is not in the lake"
            )
        return out

    def _version(self, row: Mapping[str, Any]) -> tuple[Key, Any]:
        return tuple(row[c] for c in self.config.key), row[CURSOR]

    def _check_multiset(self, facts: RunFacts, lake: LakeState) -> list[str]:
        """append without a key: each distinct row as many times as the source ever held it.

        Rows are compared on the source's current columns, less those added with a DEFAULT
        (rows read before such a column was added hold NULL in it, and they are the same rows).
        """
        columns = [c for c in facts.snapshot.columns if c not in facts.defaulted]
        expected: Counter[tuple[Any, ...]] = Counter()
        for read in self.reads:
            counts = Counter(project(row, columns) for row in read)
            for value, n in counts.items():
                expected[value] = max(expected[value], n)
        got = Counter(project(row, columns) for row in lake.rows)
        return _multiset_diff("rows read", columns, expected, got)

    def _check_merge(
        self, facts: RunFacts, lake: LakeState, full: bool, recorded: CursorValue | None
    ) -> list[str]:
        out: list[str] = []
        columns = lake.columns
        in_lake: dict[Key, list[Row]] = defaultdict(list)
        for row in lake.rows:
            in_lake[self.key(row)].append(row)
        for key, copies in sorted(in_lake.items()):
            if len(copies) > 1:
                out.append(f"key {key} is in the lake {len(copies)} times: {copies}")
        lake_rows = {key: copies[0] for key, copies in in_lake.items()}
        source = {self.key(row): row for row in facts.snapshot.rows}
        # `deletes: reconcile` (every batch: reconcile_every 1) reconciles in every run that
        # doesn't replace the table, whatever else the run does (a new key, say): every key
        # the source deleted is gone after it. A run that proved nothing new without Spark
        # reconciles nothing, and needs not (a files source's listing is unchanged, so no file
        # went).
        reconciled = full or self.config.reconcile
        with_spark = not str(facts.metadata.get("spark", "")).startswith("not started")
        if (
            self.config.reconcile
            and not full
            and with_spark
            and facts.metadata.get("deletes_reconciled") is not True
        ):
            out.append(
                f"deletes: reconcile, but the run says deletes_reconciled "
                f"{facts.metadata.get('deletes_reconciled')!r}"
            )
        ahead = [k for k, r in source.items() if not self.within(r[CURSOR], None, recorded)]
        loaded_ahead = full and any(k in lake_rows for k in ahead if not self._deleted(source[k]))
        for key in sorted(source.keys() | lake_rows.keys()):
            got: Row | None = lake_rows.get(key)
            live = source.get(key)
            if live is None:
                out += self._merge_gone(key, got, reconciled, columns)
            elif self.within(live[CURSOR], None, recorded):
                if self._deleted(live):
                    if got is not None:
                        out.append(
                            f"key {key} was soft-deleted (cursor {live[CURSOR]!r}) "
                            f"but is in the lake: {got}"
                        )
                    continue
                allowed = {freeze(live)} if full else self.current.get(key, {freeze(live)})
                if got is None:
                    out.append(
                        f"key {key} (cursor {live[CURSOR]!r} <= {recorded!r}) "
                        f"is not in the lake; source {live}"
                    )
                elif project(got, columns) not in {project(v, columns) for v in allowed}:
                    out.append(
                        f"key {key} holds {project(got, columns)}, expected "
                        f"{sorted((project(v, columns) for v in allowed), key=repr)} "
                        f"(columns {columns})"
                    )
            elif full:
                wanted = None if self._deleted(live) or not loaded_ahead else project(live, columns)
                if (None if got is None else project(got, columns)) != wanted:
                    out.append(
                        f"key {key} above the cursor after a full refresh holds {got}; expected "
                        f"{'the source live ' + str(live) if wanted else 'nothing'} "
                        "like the other keys above it"
                    )
            else:
                out += self._merge_unchanged(key, got, columns, "its version is above the cursor")
        if full:
            for key in lake_rows:
                if key in source:
                    self.current[key] = {freeze(source[key])}
        self.prev_lake = lake_rows
        return out

    def _merge_gone(
        self, key: Key, got: Row | None, reconciled: bool, columns: list[str]
    ) -> list[str]:
        """A key the source no longer has: gone once reconciled, else as the lake held it."""
        if got is None:
            return []
        if key not in self.ever:
            return [f"key {key} is in the lake but never existed in the source: {got}"]
        if reconciled:
            return [
                f"key {key} was deleted from the source and reconciled, but is in the lake: {got}"
            ]
        return self._merge_unchanged(key, got, columns, "it was deleted from the source")

    def _merge_unchanged(
        self, key: Key, got: Row | None, columns: list[str], why: str
    ) -> list[str]:
        if self.prev_lake is None:  # after a killed run: any version the key ever had
            if got is None or project(got, columns) in {
                project(v, columns) for v in self.ever.get(key, ())
            }:
                return []
            return [f"key {key} holds {got}, a version it never had"]
        before = self.prev_lake.get(key)
        same = (None if got is None else project(got, columns)) == (
            None if before is None else project(before, columns)
        )
        return [] if same else [f"key {key} changed in the lake although {why}: {before} -> {got}"]

    def _deleted(self, row: Mapping[str, Any]) -> bool:
        """Whether the row is soft-deleted: flagged, while the config names the flag."""
        return self.config.soft_deletes and bool(row.get(DELETED))

    def check_settled(self, snapshot: Snapshot, lake: LakeState) -> list[str]:
        """After a settle, a reconciling merge table holds no key the source deleted."""
        if self.config.mode != "merge" or not self.config.reconcile:
            return []
        source = {self.key(row) for row in snapshot.rows}
        stale = sorted(k for k in (self.key(r) for r in lake.rows) if k not in source)
        if stale:
            return [
                f"deletes: reconcile, but after settling the lake still holds deleted keys {stale}"
            ]
        return []


def _order(item: Any) -> str:
    return repr(item)


def _multiset_diff(
    what: str,
    columns: list[str],
    expected: Counter[tuple[Any, ...]],
    got: Counter[tuple[Any, ...]],
) -> list[str]:
    out = []
    for value, n in sorted((expected - got).items(), key=_order):
        out.append(
            f"missing from the lake: {n} x {dict(zip(columns, value, strict=True))} ({what})"
        )
    for value, n in sorted((got - expected).items(), key=_order):
        out.append(
            f"extra in the lake: {n} x {dict(zip(columns, value, strict=True))} "
            f"(expected {expected[value]}, found {got[value]})"
        )
    return out
