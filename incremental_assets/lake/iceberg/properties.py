"""The properties of an Iceberg table of this package's, decided from its settings: pure.

`TableSettings.of` is what a run makes a table with; `changes_to`, what it brings an existing
table to when the configuration changed (`commit_plan.plan_commit`). `format_version` is
the one rule of the format version, which `decisions.check_merge_writes` refuses by as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from incremental_assets.config import MergeWrites

MERGE_MODES = ("write.merge.mode", "write.update.mode", "write.delete.mode")
# The settings an existing table is kept in step with: a change applies from the next write.
KEPT_IN_STEP = (*MERGE_MODES, "write.parquet.compression-codec")


@dataclass(frozen=True)
class TableSettings:
    """How a table the run creates or replaces is laid out."""

    partitioning: tuple[str, ...] = ()  # Spark SQL transforms: `truncate(1000, id)`, ...
    properties: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def of(
        codec: str,
        merge: bool,
        partitioning: tuple[str, ...] = (),
        writes: MergeWrites = "position_deletes",
        version: int | None = None,
    ) -> TableSettings:
        """A table of this package's: format v2 (v3 for deletion vectors, or if the table is
        already: no table goes back), old metadata files deleted as they are replaced, exact
        statistics for `_batch` (a rerun replaces its batch by them), and merge tables
        merge-on-read (a merge writes delete files, not the files its rows are in) unless
        `writes` is copy_on_write."""
        properties = {
            "format-version": str(format_version(merge, writes, version)),
            "write.parquet.compression-codec": codec,
            "write.metadata.delete-after-commit.enabled": "true",
            "write.metadata.previous-versions-max": "100",
            "write.metadata.metrics.column._batch": "full",
        }
        if merge:
            mode = "copy-on-write" if writes == "copy_on_write" else "merge-on-read"
            properties |= dict.fromkeys(MERGE_MODES, mode)
        return TableSettings(partitioning=partitioning, properties=properties)

    @property
    def copy_on_write(self) -> bool:
        return self.properties.get("write.merge.mode") == "copy-on-write"

    def changes_to(self, held: Mapping[str, str], version: int) -> dict[str, str]:
        """The properties an existing table must be set to (its version only ever goes up)."""
        changed = {k: v for k, v in self.properties.items() if k in KEPT_IN_STEP}
        changed = {k: v for k, v in changed.items() if held.get(k) != v}
        if int(self.properties["format-version"]) > version:
            changed["format-version"] = self.properties["format-version"]
        return changed


def format_version(merge: bool, writes: MergeWrites, held: int | None = None) -> int:
    """A table's format version after a run: v3 where a merge table writes deletion vectors,
    else v2, and never lower than the table `held` (Iceberg takes no table back to v2)."""
    wanted = 3 if merge and writes == "deletion_vectors" else 2
    return max(wanted, held or 2)


def writes_allowed(merge: bool, writes: MergeWrites, held: int | None) -> bool:
    """Whether a table at version `held` can write as `writes` says: format v3 has no position
    deletes, and `format_version` never lowers a version."""
    return not (merge and writes == "position_deletes" and format_version(merge, writes, held) >= 3)
