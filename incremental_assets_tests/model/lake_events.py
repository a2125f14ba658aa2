"""What happens to a lake between runs, done the same way by both machines (`machine.py`,
`log_machine.py`): the table's folder removed, the whole lake copied with its catalog, the folder
put back from a copy taken after an earlier run (with the catalog's file, or not), another
writer's commit (PyIceberg deleting a row), and the table's maintenance with thresholds that make
these small tables due for compaction. Each says what it did; the machines say what the next run
must do."""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from incremental_assets.lake.iceberg.maintenance import Policy
from incremental_assets_tests.model.lake import CATALOG, copy_catalog, copy_lake_table
from incremental_assets_tests.model.runner import Runner
from incremental_assets_tests.model.table import TABLE
from incremental_assets_tests.support.project import iceberg_table

# What can happen to the lake between runs; "restored-with-catalog" puts back an Iceberg lake's
# catalog file with the table's folder (a plain Parquet lake has none: the same as "restored");
# "copied" points `lake.path` at a copy of the whole lake, its catalog included.
LAKE_EVENTS = ("removed", "moved", "copied", "restored", "restored-with-catalog", "new-instance")
COPIES = 3  # copies of the lake kept for "restored": those of the last commits


def maintenance_policy(keep: int) -> Policy:
    """A retention that expires snapshots at once past `keep` newer ones, and thresholds that
    compact the model's small tables: any deleted row, any delete file, two data files."""
    return Policy(
        keep_snapshots=keep,
        keep_snapshots_for=timedelta(0),
        deleted_fraction=1e-9,
        delete_files=1,
        small_files=2,
    )


def maintain_table(runner: Runner, keep: int) -> str | None:
    """The table's maintenance between runs under `maintenance_policy(keep)`: what it did (None:
    nothing was due). Its failure fails the example."""
    try:
        return runner.maintain(maintenance_policy(keep))
    except Exception as exc:  # the product's maintenance, on the product's table
        failure = f"{type(exc).__name__}: {exc}"[:3000]
        raise AssertionError(f"the table's maintenance failed:\n  - {failure}") from None


class LakeCopies:
    """Copies of a lake table by the commit they were taken at (the last `COPIES`), with the
    format version of each (Iceberg: a v3 copy restored under position_deletes is refused for
    that too)."""

    def __init__(self) -> None:
        self.copies: dict[str, Path] = {}
        self.versions: dict[str, int | None] = {}

    def __bool__(self) -> bool:
        return bool(self.copies)

    def keep(self, runner: Runner, commit: str, version: int | None) -> None:
        """A copy of the lake's table as the run that made `commit` left it."""
        if commit in self.copies or not (runner.lake / TABLE).is_dir():
            return
        copy = runner.directory / f"copy-{uuid.uuid4().hex[:8]}"
        copy_lake_table(runner.lake, copy)
        self.copies[commit] = copy
        self.versions[commit] = version
        while len(self.copies) > COPIES:
            dropped = next(iter(self.copies))
            shutil.rmtree(self.copies.pop(dropped))
            self.versions.pop(dropped, None)

    def older(self, now: str | None, v3: bool = True) -> list[str]:
        """The commits copied other than `now` (`v3` false: none of a format v3 table)."""
        return [c for c in self.copies if c != now and (v3 or self.versions.get(c) != 3)]

    def restore(self, runner: Runner, commit: str, with_catalog: bool) -> str:
        """The table's folder put back as `commit` left it, and (`with_catalog`) the catalog's
        file with it: what was done."""
        copy = self.copies[commit]
        shutil.rmtree(runner.lake / TABLE, ignore_errors=True)
        shutil.copytree(copy / TABLE, runner.lake / TABLE)
        restored = "the lake table's folder"
        if with_catalog and (copy / CATALOG).exists():
            copy_catalog(copy / CATALOG, runner.lake / CATALOG)
            restored += " and the catalog"
        return f"{restored} restored as commit {commit} left them"

    def drop(self) -> None:
        """Copies of another lake or of another instance's commits restore nothing of this one."""
        for copy in self.copies.values():
            shutil.rmtree(copy)
        self.copies.clear()
        self.versions.clear()


class LakeEventRules:
    """The rules both machines share: the lake's table removed, `lake.path` moved. A machine
    says when the lake may be disturbed, and what the next runs must then do."""

    runner: Runner
    copies: LakeCopies

    def _can_disturb_lake(self, *kinds: str) -> bool:
        raise NotImplementedError

    def _lake_disturbed(self, kind: str, what: str, new_row: bool) -> None:
        raise NotImplementedError

    def _lake_moved(self, lake: Path) -> None:
        """The config's lake is at `lake` now."""

    @precondition(lambda self: self._can_disturb_lake("removed"))
    @rule(new_row=st.booleans())
    def remove_lake(self, new_row: bool) -> None:
        """The table's folder deleted (rm -rf)."""
        self._lake_disturbed("lake removed", remove_table(self.runner), new_row)

    @precondition(lambda self: self._can_disturb_lake("moved"))
    @rule(new_row=st.booleans())
    def move_lake(self, new_row: bool) -> None:
        """`lake.path` changed to an empty place, the Dagster instance kept."""
        self.copies.drop()
        self._lake_moved(self.runner.move_lake())
        self._lake_disturbed("lake moved", f"lake.path changed to {self.runner.lake}", new_row)


def catalog_restored(kinds: tuple[str, ...], drawn: bool) -> bool:
    """Whether a restore puts the catalog's file back too: as drawn, where both kinds of
    restore are among `kinds`, else the one that is."""
    allowed = {"restored": False, "restored-with-catalog": True}
    catalogs = [c for kind, c in allowed.items() if kind in kinds]
    return drawn if len(catalogs) == 2 else catalogs[0]


def remove_table(runner: Runner) -> str:
    """The table's folder deleted (rm -rf)."""
    shutil.rmtree(runner.lake / TABLE, ignore_errors=True)
    return "the lake table's folder removed"


def copy_lake(runner: Runner) -> tuple[Path, Path]:
    """The whole lake copied to another place, its catalog with it (`cp -r`, as SQLite copies a
    database), and `lake.path` pointed at the copy: the original and the copy."""
    original = runner.lake
    target = runner.move_lake()
    if original.exists():
        shutil.copytree(original, target, ignore=shutil.ignore_patterns(f"{CATALOG}*"))
    else:  # a lake moved to a place no run has written yet: an empty copy
        target.mkdir(parents=True, exist_ok=True)
    if (original / CATALOG).exists():
        copy_catalog(original / CATALOG, target / CATALOG)
    return original, target


def another_writers_delete(runner: Runner, note: str) -> str:
    """Another engine's commit to the Iceberg table: PyIceberg deletes the row holding `note`."""
    iceberg_table(runner.lake, TABLE).delete(f"note = '{note}'")
    return f"another writer (PyIceberg) deleted the lake's row {note}"


def refusal_named(runner: Runner) -> list[str]:
    """What a run refused for a lake that isn't the table its stored cursor describes names:
    the stored cursor, the lake table and the fix."""
    return [
        "the stored cursor",
        f"{runner.stored_cursor()!r}",
        str(runner.lake / TABLE),
        f"incremental-assets run {TABLE} --full",
    ]
