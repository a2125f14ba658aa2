"""What kind of run a load is, decided before anything is read: pure functions of the request,
the lake's facts (`lake/facts.py`) and the source's facts.

* `kind_of_run`: whether this run replaces the table instead of adding to it (asked to; a full
  refresh the lake holds but the stored state doesn't know, key weights the lake's rows lack or
  took under another collation, a changed delete column; nothing to add to), the warnings that
  say why, and whether the read goes up to the newest row; a run that adds to the lake refuses
  one that doesn't fit (`check_lake_fits`) before the source is asked for a bound;
* `check_lake_fits`: an incremental run adds to exactly the table its stored cursor describes
  (the same identity, at the last commit recorded, or one commit past it) and in its layout;
* the predicates the two paths share: `at_recorded_commit`, `weights_in_force`,
  `key_from_catalog`, `key_enforced` (the source itself keeps the merge key unique).

The run with Spark (`load.py`) and the check without it (`nothing_new.py`) both call these, so the
two paths refuse the same lakes with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from incremental_assets.config import JdbcSourceSpec, Mode, TableSpec
from incremental_assets.errors import ConcurrentRunError, ConfigError, TableProblem, WriteError
from incremental_assets.lake import LakeFacts
from incremental_assets.lake.facts import LakeHead, files_digest
from incremental_assets.lake.iceberg.properties import writes_allowed
from incremental_assets.results import StoredState
from incremental_assets.settings import changed_settings
from incremental_assets.spark_api import T


@dataclass(frozen=True, kw_only=True)
class SourceFacts:
    """What a run learned about its source before planning."""

    schema: T.StructType
    match_key: tuple[str, ...] = ()  # the columns rows are matched on (`Source.match_key`)
    weighed_by: Mapping[str, str] | None = None  # the collation each weight is taken under
    catalog_key: tuple[str, ...] | None = None  # the source table's own primary key, if read


@dataclass(frozen=True, kw_only=True)
class RunKind:
    """What kind of run this is, decided before the source is asked for a bound."""

    # The run replaces the table: asked to, or made to by the lake (`warnings` say why), or
    # nothing to add to (no stored cursor, no cursor column, a full_refresh table).
    replace_all: bool
    # The read takes every row up to the newest: a snapshot replacing what the lake holds.
    read_to_newest: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What was asked for: a plain run, a full refresh or a bounded backfill, under `settings`."""

    full_refresh: bool
    backfill: bool
    settings: str  # the lake-shaping settings now (`settings.settings_text`)


def kind_of_run(
    table: TableSpec,
    asked: Asked,
    stored: StoredState,
    lake: LakeFacts,
    source: SourceFacts | None,
) -> RunKind:
    """Whether the run replaces the table, and why; a lake a run that adds to it can't take is
    refused here (`check_lake_fits`), before the source is asked for anything.

    A full refresh when asked for, or when the lake can't take this run's rows incrementally.
    `source` is None where the source hasn't been read (the check without Spark): what depends on
    it (the key's weights) is then left to the run that reads it.
    """
    reasons = [
        unrecorded_refresh(table, asked, stored, lake),
        changed_delete_column(table, asked, stored, lake),
    ]
    if source is not None:
        reasons.append(unmatched_weights(table, asked, lake, source))
    warnings = tuple(r for r in reasons if r is not None)
    replace_all = not asked.backfill and (
        asked.full_refresh
        or bool(warnings)
        or table.mode is Mode.FULL_REFRESH
        or table.cursor is None
        or stored.cursor is None
    )
    check_merge_writes(table, lake)
    if not replace_all:
        check_lake_fits(table, stored, lake)
    return RunKind(
        replace_all=replace_all,
        read_to_newest=replace_all and (table.mode is Mode.FULL_REFRESH or lake.holds_rows),
        warnings=warnings,
    )


def at_recorded_commit(stored: StoredState, lake: LakeFacts) -> bool:
    """Whether the lake is at the commit the last run recorded: its files and columns are that
    run's."""
    head = lake.head
    return (
        head is not None
        and head.txn == stored.lake_commit
        and head.table_id == stored.lake_table_id
    )


def weights_in_force(source: SourceFacts | None, lake: LakeFacts) -> dict[str, str]:
    """The collation each key weight is taken under: the source's where it was read, else the
    lake's record of it."""
    return dict((source.weighed_by if source is not None else None) or lake.weighed_by)


def key_from_catalog(table: TableSpec) -> bool:
    """Whether the merge key can be the source table's own primary key, read from its catalog
    (a JDBC table, not a `query:`)."""
    return (
        table.mode is Mode.MERGE
        and table.query is None
        and isinstance(table.source, JdbcSourceSpec)
    )


def unrecorded_refresh(
    table: TableSpec, asked: Asked, stored: StoredState, lake: LakeFacts
) -> str | None:
    """Why this run repeats a full refresh the lake holds but the stored state doesn't know.

    A run that replaced the table as batch N and died before its materialization was recorded
    leaves a stored cursor from before that snapshot, and this run would reuse batch N: an
    incremental run would then overwrite the snapshot with a delta.
    """
    replaced = lake.replaced_batch
    if asked.full_refresh or replaced is None or replaced <= stored.batch:
        return None
    if asked.backfill:
        raise WriteError(
            TableProblem(
                table.name,
                f"a full refresh replaced the lake table {lake.uri} as batch {replaced}, but its "
                f"run was never recorded (the last recorded batch is {stored.batch}), so a "
                "backfill would overwrite that snapshot. Nothing was written.",
                fix="run the table once without backfill_from and backfill_to (it repeats the "
                "full refresh), then run the backfill.",
            )
        )
    return (
        f"a full refresh replaced the lake table as batch {replaced} but its run was never "
        "recorded; this run repeats the full refresh"
    )


def changed_delete_column(
    table: TableSpec, asked: Asked, stored: StoredState, lake: LakeFacts
) -> str | None:
    """Why a merge reads the whole table after its `delete_column` changed.

    The lake's rows were kept or removed by the old column: rows the new one deletes are still
    there, and rows only the old one deleted are missing. Only the whole source tells.
    """
    if table.mode is not Mode.MERGE or asked.full_refresh or not lake.holds_rows:
        return None
    change = changed_settings(stored.settings, asked.settings).get("delete_column")
    if change is None:
        return None
    problem = f"delete_column changed from {change[0]} to {change[1]} since the last run"
    if asked.backfill:
        raise _whole_before_backfill(table, problem)
    return f"{problem}: this run reads the whole table (a full refresh)"


def unmatched_weights(
    table: TableSpec, asked: Asked, lake: LakeFacts, source: SourceFacts
) -> str | None:
    """Why a merge reads the whole table because the lake's rows lack a weight the key needs.

    A text key the database compares by collation is matched on its weight, which only the
    database computes: lake rows written without it (the key became text, or came to include a
    text column), or under another collation (the column was converted to another collation or
    character set), can't be matched, so this run reads the whole table instead. A lake in
    append's layout holds no merge's rows to match: the mode changed, which `check_lake_fits`
    refuses.
    """
    if table.mode is not Mode.MERGE or asked.full_refresh or not lake.holds_rows:
        return None
    if lake.layout != "merge":
        return None
    recorded = lake.weighed_by
    weighed_by = weights_in_force(source, lake)
    held = set(lake.schema.fieldNames()) if lake.schema is not None else set()
    missing = [c for c in source.match_key if c not in held]
    changed = [
        f"{name} from {recorded[name]} to {collation}"
        for name, collation in weighed_by.items()
        if recorded.get(name, collation) != collation
    ]
    if missing:
        problem = (
            f"the lake's rows don't carry {', '.join(missing)}, the weight of a text key column "
            "the database compares by its collation ('a' = 'A ')"
        )
    elif changed:
        problem = (
            f"the collation of the key's weight changed ({'; '.join(changed)}), so the lake's "
            "weights no longer match the source's"
        )
    else:
        return None
    if asked.backfill:
        raise _whole_before_backfill(table, f"{problem}, so a backfill can't match them")
    return f"{problem}: this run reads the whole table (a full refresh)"


def _whole_before_backfill(table: TableSpec, problem: str) -> WriteError:
    return WriteError(
        TableProblem(
            table.name,
            f"{problem}. Nothing was written.",
            fix="run the table once without backfill_from and backfill_to (it reads the whole "
            "table), then run the backfill.",
        )
    )


def check_lake_fits(table: TableSpec, stored: StoredState, lake: LakeFacts) -> None:
    """An incremental run adds to the lake table its stored cursor describes, in its layout."""
    check_lake_matches(table, stored, lake)
    # Append tables (and full_refresh ones) hold batches; merge tables hold rows matched on a key.
    wanted = "merge" if table.mode is Mode.MERGE else "batches"
    if lake.layout is not None and lake.layout != wanted:
        written = "merge" if lake.layout == "merge" else "append (or full_refresh)"
        raise ConfigError(
            TableProblem(
                table.name,
                f"the lake table {lake.uri} was written in {written} mode, but "
                f"the table is now mode {table.mode.value}. Loading into it incrementally would "
                "leave duplicate keys, so nothing was written and the cursor did not move.",
                "mode",
                "run a full refresh once (asset config full_refresh: true, or "
                f"`incremental-assets run {table.name} --full`) to rebuild it in "
                f"{table.mode.value} mode, or set mode back to {written}.",
            )
        )


def check_merge_writes(table: TableSpec, lake: LakeFacts) -> None:
    """A merge table's `merge_writes` is one its Iceberg table's format version allows: format v3
    has no position deletes, and no table goes back from v3 to v2."""
    if not writes_allowed(table.mode is Mode.MERGE, table.merge_writes, lake.format_version):
        raise ConfigError(
            TableProblem(
                table.name,
                f"the lake table {lake.uri} is in Iceberg format v{lake.format_version} (written "
                "with merge_writes: deletion_vectors), which has no position deletes, and Iceberg "
                "can't take a table back to format v2. Nothing was read and the cursor did not "
                "move.",
                "merge_writes",
                "set merge_writes: deletion_vectors (or copy_on_write) for this table; for a "
                "format v2 table again, drop it from the catalog and run it with --full.",
            )
        )


def check_lake_matches(table: TableSpec, stored: StoredState, lake: LakeFacts) -> None:
    """The lake holds the table the stored cursor describes: the same identity, and the commit
    the last run recorded (or the one after it, a run that committed but was not recorded).

    A folder deleted or restored from an older copy, a `lake.path` or `lake.format` changed under
    a kept Dagster instance, or a second instance writing the same lake: an incremental run would
    add only the newest rows to a table that lacks the older ones, or has others.
    """
    recorded = f"run {stored.run_id} recorded the cursor {stored.cursor!r}"
    if lake.misplaced is not None:
        raise _not_the_table(table, lake, f"{lake.misplaced}, but {recorded}")
    if stored.lake_table_id is None:
        # Recorded before lake tables had an identity: only an emptied lake can be told.
        if stored.row_count and not lake.holds_rows:
            raise _not_the_table(
                table,
                lake,
                f"it has no data files, but {recorded} with {stored.row_count} rows in it",
            )
        return
    head = lake.head
    where = f"with {stored.row_count} rows in lake table {stored.lake_table_id}"
    if head is None:
        found = (
            "it holds no table (deleted, moved, or lake.path or lake.format changed)"
            if not lake.holds_rows
            else "it holds data files but no record of the table's identity and commits "
            "(restored from a copy older than that record, or written by another tool)"
        )
        raise _not_the_table(table, lake, f"{found}, but {recorded} {where}")
    if head.table_id != stored.lake_table_id:
        raise _not_the_table(
            table,
            lake,
            f"it holds lake table {head.table_id} (written anew, or another table), but "
            f"{recorded} {where}",
        )
    listed = files_digest(f.name for f in lake.files)
    if head.files is not None and head.files != listed:
        left, now = head.files.split(":")[0], listed.split(":")[0]
        raise _not_the_table(
            table,
            lake,
            f"its last commit ({head.txn}) left {left} data files, and the folder now holds "
            f"{now} others (removed, added or restored behind the lake's back)",
        )
    if at_recorded_commit(stored, lake) or head.batch == stored.batch + 1:
        return
    if head.batch < 0:
        raise _not_the_table(
            table,
            lake,
            f"its last commit ({head.txn}) is another writer's: an engine other than this "
            f"package committed to the table after {recorded} with commit {stored.lake_commit}, "
            "so its rows are no longer what the cursor describes",
        )
    if head.batch == stored.batch:
        raise _not_the_table(
            table,
            lake,
            f"its last commit ({head.txn}) is another run's of batch {head.batch}, the batch "
            f"{recorded} after commit {stored.lake_commit}: two runs of the table overlapped, "
            "and the one recorded last is not the one the lake holds last. (The project's "
            "dagster.yaml limits each table's pool to one run at a time, which prevents it)",
        )
    raise _not_the_table(
        table,
        lake,
        f"its last commit is {head.txn} (batch {head.batch}), but {recorded} after commit "
        f"{stored.lake_commit} (batch {stored.batch}): the lake was restored from an older copy, "
        "or another Dagster instance writes to it",
    )


def check_still_last(table: TableSpec, ended_at: LakeHead | None, now: LakeHead | None) -> None:
    """The lake's last commit is still the one the run ended at, as it is about to record it.

    Where no lock keeps two runs of the table apart (an object store, `lake.lock: false`) and no
    pool does either, a run that overlapped this one may have committed after it, repeating or
    following its batch; recording this run after that one's would leave a record that is not
    the lake's last commit, and the table refused until a full refresh.
    """
    if ended_at is None or now is None or now.txn == ended_at.txn:
        return
    raise ConcurrentRunError(
        TableProblem(
            table.name,
            f"another run committed to the lake after this run's commit {ended_at.txn}: the "
            f"lake's last commit is now {now.txn} (batch {now.batch}). Two runs of the table "
            "overlapped, and the later commit is the lake's. This run records nothing, so the "
            "cursor stays where that run leaves it.",
            fix="run again if the other run failed; keep the shipped dagster.yaml's pool limit "
            "(one run per table) on every Dagster instance that runs the table.",
        )
    )


def _not_the_table(table: TableSpec, lake: LakeFacts, found: str) -> WriteError:
    return WriteError(
        TableProblem(
            table.name,
            f"the lake at {lake.uri} is not the table the stored cursor describes: {found}. An "
            "incremental run would leave the lake without the rows before the cursor, so nothing "
            "was written and the cursor did not move.",
            fix=f"rebuild the table from the source with `incremental-assets run {table.name} "
            "--full` (or asset config full_refresh: true; `incremental-assets cursor reset "
            f"{table.name}` makes the next run one), or put the lake back where and as it was.",
        )
    )


def key_enforced(table: TableSpec, source: SourceFacts) -> bool:
    """Whether the merge key is the source table's own primary key, which no two rows share."""
    if not key_from_catalog(table) or source.catalog_key is None:
        return False
    return set(source.catalog_key) == set(table.primary_key)
