"""The settings that decide what a table's lake holds, as one record a run can compare.

Every run records them (`settings` metadata) and the asset's code version is their digest, so a
change shows in Dagster's UI as a new code version. A run whose settings differ from the stored
run's can't be proven to have nothing new without Spark (`nothing_new.py`): it goes through the
same refusals and migrations as any run with Spark, and says what changed (`settings_changed`).
Settings that only decide when or how a run reads (schedules, lookback, partitions, limits) are
left out: they change nothing the lake holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from incremental_assets.config import FilesSourceSpec, LakeSpec, Mode, TableSpec


def lake_settings(table: TableSpec, lake: LakeSpec, format: str) -> dict[str, Any]:
    """The table's lake-shaping settings, by name; `format` is the lake table's (`format_of`)."""
    settings: dict[str, Any] = {
        "mode": table.mode.value,
        "reads": table.query if table.query is not None else table.table,
        "cursor": table.cursor.column if table.cursor else None,
        "cursor_type": table.cursor.declared_type if table.cursor else None,
        "primary_key": list(table.primary_key),
        "delete_column": table.delete_column,
        "deletes": table.deletes,
        "columns": None if table.columns is None else list(table.columns),
        "exclude_columns": list(table.exclude_columns),
        "null_cursor": table.null_cursor,
        "lake": lake.table_uri(table.name),
        "format": format,
        "compression": lake.compression,
    }
    if table.capture == "log":
        settings["capture"] = table.capture
    if table.mode is Mode.MERGE:
        # How merges write (which can move an Iceberg table to format v3 for good), and how the
        # table is partitioned by its key when a run makes it.
        settings["merge_writes"] = table.merge_writes
        settings["buckets"] = table.buckets
        settings["bucket_rows"] = table.bucket_rows
    if isinstance(table.source, FilesSourceSpec):
        settings["files"] = {
            "format": table.source.format,
            "options": dict(sorted({**table.source.options, **table.read_options}.items())),
            "schema": table.schema_ddl,
        }
    return settings


def settings_text(table: TableSpec, lake: LakeSpec, format: str) -> str:
    """The settings as canonical JSON: what a run records."""
    return canonical(lake_settings(table, lake, format))


def canonical(settings: Mapping[str, Any]) -> str:
    """Settings as the one JSON text runs compare."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def settings_digest(table: TableSpec, lake: LakeSpec) -> str:
    """A short digest of the settings as configured: the asset's code version."""
    text = settings_text(table, lake, lake.format or "auto")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_settings(stored: str | None, now: str) -> dict[str, tuple[Any, Any]]:
    """The settings that differ from the stored run's, as (then, now); none if it recorded none.
    A setting the stored record lacks is not compared: it was recorded before the package knew
    the setting, and counting it would send every table through Spark once after an upgrade."""
    if stored is None:
        return {}
    before, after = json.loads(stored), json.loads(now)
    return {
        name: (before[name], after.get(name))
        for name in sorted(before)
        if before[name] != after.get(name)
    }


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(
        f"{name}: {json.dumps(a)} -> {json.dumps(b)}" for name, (a, b) in changes.items()
    )
