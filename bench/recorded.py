"""What a run of ours recorded, read from its materialization's metadata through the package's
own record (`incremental_assets.metadata.TableMetadata`), so that the benchmark reads the
internals (`spark_jobs`, `spark_stages`) where the package keeps them.

`maintenance` is the sentence the run recorded ("compact: ...; expire: ... (1.2s)", or
"failed: ..."); `maintenance_seconds` and `maintenance_tasks` are read from it. The run's
`write_seconds` runs from the end of the stage to the end of the maintenance after the commit:
`commit_seconds` is it without the maintenance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from incremental_assets.metadata import TableMetadata

_SECONDS = re.compile(r"\((\d+(?:\.\d+)?)s\)\s*$")
_TASKS = ("compact", "expire", "orphans")


def maintenance_seconds(maintenance: str | None) -> float | None:
    """The seconds the run's maintenance took, as its sentence ends "(1.2s)"; None when none ran
    (or it failed before saying)."""
    if not maintenance:
        return None
    found = _SECONDS.search(maintenance)
    return float(found.group(1)) if found else None


def maintenance_tasks(maintenance: str | None) -> list[str]:
    """The tasks the sentence names, in order ("failed" when it failed)."""
    if not maintenance:
        return []
    if maintenance.startswith("failed"):
        return ["failed"]
    named = (part.split(":", 1)[0].strip() for part in maintenance.split("; "))
    return [task for task in named if task in _TASKS]


def recorded(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The figures the benchmark keeps of one materialization's metadata."""
    record = TableMetadata.extract(metadata)
    maintained = maintenance_seconds(record.maintenance)
    counts = (record.rows_inserted, record.rows_updated, record.rows_deleted)
    return {
        "rows": record.rows_extracted,
        "rows_written": record.rows_written,
        "files": record.files_written,
        "extract_seconds": record.extract_seconds,
        "write_seconds": record.write_seconds,
        "engine_seconds": (record.extract_seconds or 0.0) + (record.write_seconds or 0.0),
        # The write's time without the maintenance after the commit, which it includes.
        "commit_seconds": (record.write_seconds or 0.0) - (maintained or 0.0),
        "rows_rewritten": record.rows_rewritten,
        "merge_strategy": record.merge_strategy,
        "rows_changed": sum(c or 0 for c in counts) if record.rows_inserted is not None else None,
        "spark_jobs": record.spark_jobs,
        "spark_stages": record.spark_stages,
        "spark": record.spark,
        "maintenance": record.maintenance,
        "maintenance_seconds": maintained,
        "snapshot_id": record.iceberg_snapshot_id,
    }
