"""Why a run's commit to an Iceberg table was refused, read from the table's metadata: pure.

moved_under   main moved past the snapshot the run computed against: another writer's
              commit, or maintenance's compaction, named
replaced_over the run's `CREATE OR REPLACE` landed over a commit that landed after the run
              read the table (Iceberg commits a replace over whatever is there)
"""

from __future__ import annotations

from dataclasses import dataclass

from incremental_assets.errors import ConcurrentRunError, TableProblem
from incremental_assets.lake.iceberg.records import (
    BATCH,
    DATA_PRESERVING,
    RUN_ID,
    SnapshotInfo,
    TableState,
)

_FIX = (
    "run again: the next run starts from what the other one recorded. To keep runs of a table "
    "from overlapping, give each table's Dagster pool a limit of 1 (the project's dagster.yaml "
    "does)."
)


@dataclass(frozen=True)
class Named:
    """The table as the messages name it."""

    table_name: str  # the configured table
    described: str  # `IcebergLake.describe()`


def moved_under(table: Named, base: int | None, state: TableState | None) -> ConcurrentRunError:
    """Main is no longer at `base`, which the run's commit was computed against."""
    was = f"snapshot {base}" if base is not None else "no snapshot"
    since = _since(state, base) if state is not None else []
    if since and all(s.operation == DATA_PRESERVING for s in since):
        # Only maintenance moved main: no other writer, and no row changed.
        return ConcurrentRunError(
            TableProblem(
                table.table_name,
                f"the {table.described} was compacted (snapshot {since[0].snapshot_id}: its "
                "files rewritten, no row changed) while this run was computing its commit "
                f"against {was}, which the commit's files no longer match. This run's commit was "
                "refused, so nothing of it was committed and the cursor did not move.",
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
            table.table_name,
            f"another writer committed to the {table.described} while this run was computing "
            f"its commit against {was}: the table is now at {now}. Two runs of the table "
            "overlapped (no lock keeps them apart on this storage), or another engine wrote to "
            "it. This run's commit was refused, so nothing of it was committed and the cursor "
            "did not move.",
            fix=_FIX,
        )
    )


def replaced_over(
    table: Named, base: int | None, state: TableState, made: int
) -> ConcurrentRunError | None:
    """The refusal of a run whose `CREATE OR REPLACE` (snapshot `made`) replaced a commit that
    landed on main after the run read the table at `base`: that commit's rows are gone from it."""
    history = list(state.main_history)
    if made not in history or base is None:
        return None
    before = history[: history.index(made)]
    start = len(before) - before[::-1].index(base) if base in before else 0
    replaced = [
        state.snapshots[s]
        for s in before[start:]
        if s in state.snapshots and state.snapshots[s].operation != DATA_PRESERVING
    ]
    if not replaced:
        return None
    lost = replaced[-1]
    writer = lost.summary.get(RUN_ID)
    by = f"Dagster run {writer}" if writer else "another engine"
    return ConcurrentRunError(
        TableProblem(
            table.table_name,
            f"this run replaced the {table.described} whole (snapshot {made}), but snapshot "
            f"{lost.snapshot_id}, committed by {by} after this run read the table at snapshot "
            f"{base}, landed first, and Iceberg's replace commits over whatever is there: the "
            "table now holds this run's rows, not that commit's. Its rows stay readable as "
            f"VERSION AS OF {lost.snapshot_id} until it expires. This run is not recorded: the "
            "cursor did not move, and the next run repeats its full refresh.",
            fix="if that commit's rows matter, restore them from VERSION AS OF "
            f"{lost.snapshot_id}. To keep runs of a table from overlapping, give each table's "
            "Dagster pool a limit of 1 (the project's dagster.yaml does), and let no other "
            "engine write the table.",
        )
    )


def _since(state: TableState, base: int | None) -> list[SnapshotInfo]:
    """Main's snapshots after `base`, newest first (all of main's if base is gone from it)."""
    found = []
    for snapshot in state.ancestry():
        if snapshot.snapshot_id == base:
            break
        found.append(snapshot)
    return found
