"""One run's commit to an Iceberg table, made by Spark: on a branch, then `main` moved to it.

    evolve      the table's schema, in place (columns added, types promoted): no snapshot
    begin       a branch `ia-<commit id>` at the snapshot the run read its facts from
    (write)     the writer appends or merges into the branch: one snapshot, its summary ours
    publish     `fast_forward` main to the branch, which Iceberg refuses unless main is still
                where the branch began; the branch is dropped
    replace     a snapshot of the whole table: a first load (`CREATE TABLE ... AS SELECT`); a
                full refresh or a change of key, every row overwritten on the run's branch
                (the partition spec first changed in place if it must), then published; a type
                Iceberg can't promote (`CREATE OR REPLACE TABLE ... AS SELECT`)

So each run adds one snapshot to `main`, or none; a second writer that committed meanwhile makes
this commit fail, whatever Iceberg's own retries do (they only ever rebase onto the run's own
branch); readers see `main` before or after. The one exception is `CREATE OR REPLACE`, which
Iceberg commits over whatever landed: a commit it replaced is found after the fact and fails
the run, naming it. A run that dies leaves its branch, which the next
commit drops once it is a day old (a younger one may be a live run's); Iceberg's Spark writer
deletes the files of a write that failed, and a branch's files go with its snapshot's expiry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.errors import ConcurrentRunError, TableProblem, WriteError
from incremental_assets.lake.facts import LakeFacts, LakeHead
from incremental_assets.lake.iceberg.maintenance import apply_deletes
from incremental_assets.lake.iceberg.partitions import consistent_with, evolution
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import (
    BATCH,
    DATA_PRESERVING,
    PREFIX,
    REWRITE,
    RUN_ID,
    SnapshotInfo,
    TableState,
    branch_name,
    deletes_of,
    head_at,
    head_of,
    head_snapshot,
    landed,
    made_by,
    our_branches,
)
from incremental_assets.lake.iceberg.schema import promotable, spark_schema, storable
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.lake.names import txn_time
from incremental_assets.pause_points import pause_point
from incremental_assets.spark_api import F, T

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A branch left younger than this may be a live run's (without the lock, runs can overlap).
DEAD_BRANCH_AGE = timedelta(days=1)
_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
# What Iceberg says when it can't tell whether the catalog took a commit.
_UNKNOWN_OUTCOME = ("CommitStateUnknownException", "Commit state unknown")


@dataclass
class IcebergCommit:
    """One run's commit under way; `lake.commits` holds it until it is published or dropped."""

    lake: IcebergLake
    spark: SparkSession  # bound to the lake's catalog
    facts: LakeFacts  # the table as the run read it: `main` must still be there
    txn: str
    summary: Mapping[str, str]  # the snapshot summary properties of the run's snapshot
    branch: str | None = None
    snapshot: SnapshotInfo | None = None  # the snapshot the commit made (on its branch)
    landed: bool = False  # main holds the commit
    properties: Mapping[str, str] = field(default_factory=dict)  # the table's, as last read
    _table_id: str = ""
    _unknown: bool = False  # the commit raised without saying whether it took

    @staticmethod
    def open(
        lake: IcebergLake,
        spark: SparkSession,
        facts: LakeFacts,
        txn: str,
        summary: Mapping[str, str],
    ) -> IcebergCommit:
        commit = IcebergCommit(lake, lake.session(spark), facts, txn, summary)
        lake.commits[txn] = commit
        return commit

    @property
    def base(self) -> int | None:
        """The snapshot `main` was at when the run read the table (the head, or a snapshot
        maintenance made after it)."""
        return self.facts.current_snapshot

    # -- reading what the run was computed against ----------------------------------------

    def base_frame(self) -> DataFrame:
        """The table's rows as the run read its facts (the snapshot `main` was at)."""
        reader = self.spark.read
        if self.base is not None:
            reader = reader.option("versionAsOf", str(self.base))
        return reader.table(self.lake.reference())

    # -- changing the table in place ------------------------------------------------------

    def evolve(self, lake: T.StructType | None, target: T.StructType) -> bool:
        """Add the target's new columns and promote widened types, in place; False if a type
        changes in a way only rewriting the rows can (`replace`)."""
        if lake is None:
            return True
        held = {f.name: f.dataType for f in lake.fields}
        statements = []
        for column in target.fields:
            old = held.get(column.name)
            name = SPARK_SQL.quote(column.name)
            if old is None:
                statements.append(f"ADD COLUMN {name} {column.dataType.simpleString()}")
            elif old != column.dataType:
                if not promotable(old, column.dataType):
                    return False
                statements.append(f"ALTER COLUMN {name} TYPE {column.dataType.simpleString()}")
        for statement in statements:
            self.spark.sql(f"ALTER TABLE {self.lake.reference()} {statement}")
        return True

    def conform(self, settings: TableSettings) -> None:
        """Set the table's write properties (and format version) to the settings' where they
        differ: the configuration changed since the table was made. A table whose merges copy on
        write has its deletes applied first (`maintenance.apply_deletes`): its merges would
        leave them behind, miscounting its rows."""
        state = self._state()
        if state is None:
            return
        changed = settings.changes_to(state.properties, state.format_version)
        if changed:
            listed = ", ".join(f"'{k}'='{v}'" for k, v in changed.items())
            self.spark.sql(f"ALTER TABLE {self.lake.reference()} SET TBLPROPERTIES ({listed})")
        self.properties = {**state.properties, **changed}
        current = state.current
        if settings.copy_on_write and current is not None and deletes_of(current).files:
            if current.snapshot_id != self.base:
                raise self._conflict(state)
            apply_deletes(self.spark, self.lake.target())
            self._rebase()

    # -- a snapshot on the run's branch, then main moved to it ----------------------------

    def begin(self) -> str:
        """Make the run's branch where main was when the run read it; the write's target."""
        self._drop_orphan_branches()
        self.branch = branch_name(self.txn)
        at = f" AS OF VERSION {self.base}" if self.base is not None else ""
        self.spark.sql(
            f"ALTER TABLE {self.lake.reference()} CREATE BRANCH {SPARK_SQL.quote(self.branch)}{at}"
        )
        return self.lake.reference(self.branch)

    def written(self) -> SnapshotInfo | None:
        """The snapshot the write made on the branch, if it made one."""
        assert self.branch is not None
        state = self._state()
        if state is None or self.branch not in state.refs:
            raise WriteError(
                TableProblem(
                    self.lake.table_name,
                    f"this run's branch of the {self.lake.describe()} ({self.branch}) was "
                    "dropped before main could move to it: by hand, or by another engine's "
                    "maintenance. Nothing was committed and the cursor did not move.",
                    fix="run again.",
                )
            )
        snapshot = state.snapshots.get(state.refs[self.branch])
        if snapshot is None or snapshot.snapshot_id == self.base:
            return None
        self.snapshot = snapshot
        self._table_id = state.table_uuid
        self.properties = state.properties
        return snapshot

    def publish(self) -> LakeHead:
        """Move main to the branch, if main is still where the branch began; drop the branch.
        The head is the branch's snapshot: nothing is read once main has moved, so a catalog
        that stops answering then can't make a committed run look failed."""
        assert self.branch is not None
        snapshot = self.snapshot or self.written()
        assert snapshot is not None, "publish() of a branch the write made no snapshot on"
        pause_point("mid-commit")
        try:
            self.spark.sql(
                f"CALL {self.lake.catalog.name}.system.fast_forward(table => "
                f"'{self.lake.procedure_table()}', branch => 'main', to => '{self.branch}')"
            ).collect()
        except Exception as exc:
            self._settle(exc)
        self.landed = True
        self.lake.commits.pop(self.txn, None)
        self._drop_branch(self.branch)
        return head_at(self._table_id, snapshot, self._metadata_location())

    def _metadata_location(self) -> str | None:
        """The table's metadata file now, for readers: read if the catalog answers, else None."""
        try:
            state = self._state()
        except WriteError:
            return None
        return state.metadata_location if state is not None else None

    def abandon(self) -> bool:
        """Drop the run's branch, unless its commit landed or may have; say whether it did."""
        if self._unknown or self.landed:
            return False
        if self.branch is not None:
            self._drop_branch(self.branch)
        return True

    # -- a snapshot of the whole table -----------------------------------------------------

    def replace(self, frame: DataFrame, settings: TableSettings) -> LakeHead:
        """The table made `frame`'s rows in one snapshot, partitioned as `settings` say:
        created, or replaced in place (the table keeps its identity and its older snapshots,
        readable as they were).

        A table whose columns stay as they are has its partition spec changed in place where
        it differs (`partitions.evolution`), then its rows replaced on the run's branch (every
        row overwritten), and `main` moved to it only if it is still where the run read it, as
        any run's commit. Otherwise Iceberg's `CREATE OR REPLACE` (with the parameters the
        table's partition fields had, `partitions.consistent_with`, then the spec changed for
        the writes after it), which commits over whatever landed meanwhile: a commit it
        replaced is found after the fact and fails the run (`_refuse_replaced_over`)."""
        state = None
        if self.facts.misplaced is not None:
            self.lake.forget()  # the lake's own catalog only; elsewhere it refuses
        else:
            state = self._state()
        if state is not None and _same_columns(state, frame.schema):
            self._partition(state, settings.partitioning)
            return self._overwrite(frame, settings)
        self._recreate(frame, settings, self.summary, state)
        self.landed = True
        head = self._head()
        self.lake.commits.pop(self.txn, None)
        return head

    def _recreate(
        self,
        frame: DataFrame,
        settings: TableSettings,
        summary: Mapping[str, str],
        state: TableState | None,
    ) -> None:
        """`CREATE [OR REPLACE] TABLE ... AS SELECT` (`_replace_table`), partitioned so that no
        field name of the table gets a second meaning (`partitions.consistent_with`), then the
        spec made the settings' for the writes after it."""
        fields = state.partition_fields if state is not None else ()
        created = replace(settings, partitioning=consistent_with(settings.partitioning, fields))
        self._replace_table(frame, created, summary)
        if created.partitioning != settings.partitioning:
            replaced = self._state()
            assert replaced is not None
            self._partition(replaced, settings.partitioning)

    def _partition(self, state: TableState, wanted: tuple[str, ...]) -> None:
        """The table's partition spec made `wanted`, in place (`partitions.evolution`)."""
        for clause in evolution(state.partitioning, wanted):
            self.spark.sql(f"ALTER TABLE {self.lake.reference()} {clause}")

    def _overwrite(self, frame: DataFrame, settings: TableSettings) -> LakeHead:
        """Every row of the table replaced by `frame`'s on the run's branch, then published."""
        self.conform(settings)
        target = self.begin()
        with self.summarized():
            frame.writeTo(target).overwrite(F.lit(True))
        if self.written() is None:
            raise self._conflict(self._state())
        return self.publish()

    def rewrite_types(self, frame: DataFrame, settings: TableSettings) -> None:
        """Give columns types Iceberg can't change in place (a decimal's scale, an integer made
        a decimal): the table replaced by its own rows, `frame`, cast, in the partitioning it
        has. The snapshot carries the head's commit forward (it changes no row), and the run's
        own snapshot follows from it."""
        state = self._state()
        head = head_snapshot(state) if state is not None else None
        assert state is not None and head is not None
        carried = {k: v for k, v in head.summary.items() if k.startswith(PREFIX) or k == RUN_ID}
        kept = replace(settings, partitioning=state.partitioning)
        self._recreate(frame, kept, {**carried, REWRITE: "types"}, state)
        rewritten = self._state()
        if rewritten is not None and rewritten.current_snapshot_id is not None:
            self._refuse_replaced_over(rewritten, rewritten.current_snapshot_id)
        self._rebase()

    def _rebase(self) -> None:
        """Take main's new snapshot, made by this commit's own rewrite of the rows it read
        (their types, or their deletes), as the snapshot the run's commit must find main at."""
        rewritten = self._state()
        self.facts = replace(
            self.facts,
            head=head_of(rewritten) if rewritten else None,
            current_snapshot=rewritten.current_snapshot_id if rewritten else None,
        )

    def _replace_table(
        self, frame: DataFrame, settings: TableSettings, summary: Mapping[str, str]
    ) -> None:
        lake, spark = self.lake, self.spark
        namespace = ".".join(
            SPARK_SQL.quote(p) for p in [lake.catalog.name, *lake.namespace.split(".")]
        )
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        state = self._state()
        exists = state is not None
        if exists and self._current(state) != self.base:
            raise self._conflict(state)
        location = lake.uri if "://" in lake.uri else f"file:{lake.uri}"
        try:
            with self.summarized(summary):
                pause_point("mid-commit")
                if settings.partitioning:
                    self._replace_by_sql(frame, settings, exists, location)
                else:
                    # An action of `frame`'s own, so that what it observes reaches the caller
                    # (a Spark Connect client hears only its DataFrames' own actions' metrics).
                    writer = frame.writeTo(lake.reference()).using("iceberg")
                    for key, value in {**settings.properties, "location": location}.items():
                        writer = writer.tableProperty(key, value)
                    writer.createOrReplace() if exists else writer.create()
        except Exception as exc:
            if "already exists" in str(exc) and not exists:
                raise self._conflict(self._state()) from None
            self._settle(exc)

    def _replace_by_sql(
        self, frame: DataFrame, settings: TableSettings, exists: bool, location: str
    ) -> None:
        """`CREATE [OR REPLACE] TABLE ... AS SELECT`, for partition transforms (`truncate`)
        DataFrameWriterV2 can't name."""
        verb = "CREATE OR REPLACE TABLE" if exists else "CREATE TABLE"
        properties = ", ".join(f"'{k}'='{v}'" for k, v in settings.properties.items())
        with self.viewed(frame, "rows") as view:
            self.spark.sql(
                f"{verb} {self.lake.reference()} USING iceberg PARTITIONED BY "
                f"({', '.join(settings.partitioning)}) LOCATION '{location}' TBLPROPERTIES "
                f"({properties}) AS SELECT * FROM {view}"
            )

    # -- summaries, views, states, outcomes --------------------------------------------------

    @contextmanager
    def viewed(self, frame: DataFrame, what: str) -> Iterator[str]:
        """`frame` under a name the commit's SQL can use, whichever session made it (a global
        temporary view: the application's sessions share them)."""
        name = f"ia_{self.txn}_{what}"
        frame.createOrReplaceGlobalTempView(name)
        try:
            yield f"global_temp.{SPARK_SQL.quote(name)}"
        finally:
            frame.sparkSession.catalog.dropGlobalTempView(name)

    @contextmanager
    def summarized(self, summary: Mapping[str, str] | None = None) -> Iterator[None]:
        """The run's summary (or `summary`) on every snapshot written meanwhile: Spark takes it
        from the session's configuration, for SQL statements as for DataFrame writes."""
        summary = self.summary if summary is None else summary
        keys = [_SNAPSHOT_PROPERTY + key for key in summary]
        for key, value in summary.items():
            self.spark.conf.set(_SNAPSHOT_PROPERTY + key, value)
        try:
            yield
        finally:
            for key in keys:
                self.spark.conf.unset(key)

    def _state(self) -> TableState | None:
        return self.lake.state()

    @staticmethod
    def _current(state: TableState | None) -> int | None:
        return state.current_snapshot_id if state is not None else None

    def _head(self) -> LakeHead:
        """The head the run's commit made (another writer may have committed after it)."""
        state = self._state()
        head = made_by(state, self.txn) if state is not None else None
        if state is None or head is None or head.snapshot_id is None:
            raise self._conflict(state)
        self._refuse_replaced_over(state, head.snapshot_id)
        self.snapshot = state.snapshots[head.snapshot_id]
        self._table_id = state.table_uuid
        self.properties = state.properties
        return head

    def _settle(self, exc: Exception) -> None:
        """After a commit raised: go on if it landed (only the answer was lost); fail as a
        conflict if another writer moved main; as a commit whose outcome can't be told if the
        catalog said so or can't be read; else with the cause, the commit surely not taken."""
        try:
            state = self._state()
        except WriteError:
            self._unknown = True
            raise exc from None
        if state is not None and landed(state, self.txn):
            return
        if self._current(state) != self.base or "not an ancestor" in str(exc):
            self.abandon()
            raise self._conflict(state) from None
        if any(mark in str(exc) for mark in _UNKNOWN_OUTCOME):
            self._unknown = True
            raise exc
        self.abandon()
        raise exc

    def _conflict(self, state: TableState | None) -> ConcurrentRunError:
        was = f"snapshot {self.base}" if self.base is not None else "no snapshot"
        fix = (
            "run again: the next run starts from what the other one recorded. To keep runs of "
            "a table from overlapping, give each table's Dagster pool a limit of 1 (the "
            "project's dagster.yaml does)."
        )
        since = _since(state, self.base) if state is not None else []
        if since and all(s.operation == DATA_PRESERVING for s in since):
            # Only maintenance moved main: no other writer, and no row changed.
            return ConcurrentRunError(
                TableProblem(
                    self.lake.table_name,
                    f"the {self.lake.describe()} was compacted (snapshot {since[0].snapshot_id}: "
                    "its files rewritten, no row changed) while this run was computing its "
                    f"commit against {was}, which the commit's files no longer match. This "
                    "run's commit was refused, so nothing of it was committed and the cursor "
                    "did not move.",
                    fix="run again: it reads the compacted table. Maintenance of another engine's "
                    "that compacts this table while runs go on causes this; keep the table's "
                    "maintenance to the package (lake.maintenance), which takes the table's pool "
                    "and lock.",
                )
            )
        writer = next((s for s in since if s.operation != DATA_PRESERVING), None)
        if writer is None:
            now = "no snapshot"
        else:
            now = f"snapshot {writer.snapshot_id}"
            if writer.txn is not None:
                now += f" (commit {writer.txn}, batch {writer.summary.get(BATCH)})"
            made = writer.summary.get(RUN_ID)
            now += f", made by Dagster run {made}" if made else ", made by another engine"
        return ConcurrentRunError(
            TableProblem(
                self.lake.table_name,
                f"another writer committed to the {self.lake.describe()} while this run was "
                f"computing its commit against {was}: the table is now at {now}. Two runs of "
                "the table overlapped (no lock keeps them apart on this storage), or another "
                "engine wrote to it. This run's commit was refused, so nothing of it was "
                "committed and the cursor did not move.",
                fix=fix,
            )
        )

    def _refuse_replaced_over(self, state: TableState, made: int) -> None:
        """Fail the run if its `CREATE OR REPLACE` (snapshot `made`) replaced a commit that
        landed on main after the run read the table: that commit's rows are no longer in it."""
        history = list(state.main_history)
        if made not in history:
            return
        before = history[: history.index(made)]
        start = len(before) - before[::-1].index(self.base) if self.base in before else 0
        replaced = [
            state.snapshots[s]
            for s in before[start:]
            if s in state.snapshots and state.snapshots[s].operation != DATA_PRESERVING
        ]
        if not replaced or self.base is None:
            return
        lost = replaced[-1]
        self.lake.commits.pop(self.txn, None)  # landed: nothing of it to abandon
        writer = lost.summary.get(RUN_ID)
        by = f"Dagster run {writer}" if writer else "another engine"
        raise ConcurrentRunError(
            TableProblem(
                self.lake.table_name,
                f"this run replaced the {self.lake.describe()} whole (snapshot {made}), but "
                f"snapshot {lost.snapshot_id}, committed by {by} after this run read the table "
                f"at snapshot {self.base}, landed first, and Iceberg's replace commits over "
                f"whatever is there: the table now holds this run's rows, not that commit's. "
                f"Its rows stay readable as VERSION AS OF {lost.snapshot_id} until it expires. "
                "This run is not recorded: the cursor did not move, and the next run repeats "
                "its full refresh.",
                fix="if that commit's rows matter, restore them from VERSION AS OF "
                f"{lost.snapshot_id}. To keep runs of a table from overlapping, give each "
                "table's Dagster pool a limit of 1 (the project's dagster.yaml does), and let "
                "no other engine write the table.",
            )
        )

    def _drop_branch(self, branch: str) -> None:
        with suppress(Exception):
            self.spark.sql(
                f"ALTER TABLE {self.lake.reference()} DROP BRANCH IF EXISTS {SPARK_SQL.quote(branch)}"
            )

    def _drop_orphan_branches(self) -> None:
        state = self._state()
        if state is None:
            return
        for branch, txn in our_branches(state).items():
            if txn != self.txn and _age(txn) >= DEAD_BRANCH_AGE:
                self._drop_branch(branch)


def _same_columns(state: TableState, schema: T.StructType) -> bool:
    """Whether the table already has `schema`'s columns (names and types), so that its rows can
    be replaced without replacing the table."""
    if state.schema is None:
        return False
    held = [(f.name, f.dataType.simpleString()) for f in spark_schema(state.schema).fields]
    return held == [(f.name, storable(f.dataType).simpleString()) for f in schema.fields]


def _since(state: TableState, base: int | None) -> list[SnapshotInfo]:
    """Main's snapshots after `base`, newest first (all of main's if base is gone from it)."""
    found = []
    for snapshot in state.ancestry():
        if snapshot.snapshot_id == base:
            break
        found.append(snapshot)
    return found


def _age(txn: str) -> timedelta:
    """How old one of our branches' commit ids is (`our_branches` yields only real ones)."""
    made = txn_time(txn)
    assert made is not None, txn
    return datetime.now(UTC) - made
