"""The schedules the configuration asks for: a table's `schedule:` loads it; a merge table's
`checks.key_audit:` executes its `primary_key_unique` check alone, over every lake file."""

from __future__ import annotations

import dagster as dg

from incremental_assets.checks import KEY_UNIQUE
from incremental_assets.config import Project
from incremental_assets.translator import IncrementalAssetsTranslator


def build_schedules(
    project: Project, translator: IncrementalAssetsTranslator
) -> list[dg.ScheduleDefinition]:
    schedules = []
    for table in project.tables:
        key = translator.asset_key(table)
        if table.schedule is not None:
            schedules.append(
                dg.ScheduleDefinition(
                    name=translator.schedule_name(table),
                    cron_schedule=table.schedule,
                    target=dg.AssetSelection.assets(key),
                    description=f"Loads table {table.name} on '{table.schedule}' (UTC).",
                    # Writing `schedule:` in the config is the request to run it.
                    default_status=dg.DefaultScheduleStatus.RUNNING,
                )
            )
        audit = table.checks.key_audit
        if audit is not None:
            schedules.append(
                dg.ScheduleDefinition(
                    name=translator.key_audit_schedule_name(table),
                    cron_schedule=audit,
                    target=dg.AssetSelection.checks(dg.AssetCheckKey(key, KEY_UNIQUE)),
                    description=(
                        f"Checks every lake file of table {table.name} for keys held twice "
                        f"on '{audit}' (UTC), without loading."
                    ),
                    default_status=dg.DefaultScheduleStatus.RUNNING,
                )
            )
    return schedules
