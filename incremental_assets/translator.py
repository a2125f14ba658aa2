"""Table config -> AssetSpec, and every name derived from it.

The translator owns the names: asset keys, op names, the job, schedule and sensor names, the
pools. Everything else (the factory, schedules, sensors, the CLI, the tests) asks it. Subclass it
and override `get_asset_spec` to change keys, groups or tags, then name the subclass in the
configuration (`translator: my_package.MyTranslator`), so that the assets and the
`incremental-assets` command agree.
"""

from __future__ import annotations

import importlib
from typing import Any

import dagster as dg

from incremental_assets.config import JdbcSourceSpec, LakeSpec, Mode, Project, TableSpec
from incremental_assets.errors import ConfigError, Problem
from incremental_assets.lake import NEW_TABLES, format_of
from incremental_assets.metadata import TABLE_NAME, URI
from incremental_assets.settings import settings_digest

ALL_TABLES_JOB = "incremental_assets_all"
AUTOMATION_SENSOR = "incremental_assets_automation_sensor"
TABLE_METADATA_KEY = "incremental_assets/table"


class IncrementalAssetsTranslator:
    """Every name and spec derived from a table's configuration.

    Override `get_asset_spec` for keys, groups, kinds, tags and metadata; the other names (op,
    schedule, sensor, pool, Iceberg identifier) follow the asset key, so they follow an override.
    """

    def __init__(self, lake: LakeSpec, suffix: str = "") -> None:
        self.lake = lake
        # Tells apart the project-wide names (job, automation sensor) of several projects.
        self.suffix = suffix

    def get_asset_spec(self, table: TableSpec) -> dg.AssetSpec:
        """The table's asset: the one override point for keys, groups, kinds, tags, metadata.

        Subclass it and name the subclass in the configuration (`translator: pkg.MyTranslator`)
        so the assets and the `incremental-assets` command agree:

            class MyTranslator(IncrementalAssetsTranslator):
                def get_asset_spec(self, table: TableSpec) -> dg.AssetSpec:
                    spec = super().get_asset_spec(table)
                    return spec.replace_attributes(key=spec.key.with_prefix("raw"))
        """
        metadata: dict[str, dg.MetadataValue | str] = {
            URI: dg.MetadataValue.text(self.lake.table_uri(table.name)),
            "mode": table.mode.value,
            "cursor_column": table.cursor.column if table.cursor else "",
            "source": self.source_text(table),
            TABLE_METADATA_KEY: table.name,
        }
        lake_format = self.lake_format(table)
        if lake_format == "iceberg":
            metadata[TABLE_NAME] = dg.MetadataValue.text(self.lake_table_name(table))
        return dg.AssetSpec(
            key=dg.AssetKey(list(table.asset_key_path)),
            group_name=table.source.name,
            kinds={"spark", table.source.kind, lake_format},
            description=table.description or self.describe(table),
            code_version=settings_digest(table, self.lake),
            metadata=metadata,
            tags={"incremental_assets/mode": table.mode.value},
            automation_condition=self.automation_condition(table),
            freshness_policy=(
                dg.FreshnessPolicy.time_window(fail_window=table.freshness)
                if table.freshness
                else None
            ),
        )

    def lake_format(self, table: TableSpec) -> str:
        """The table's lake format, as configured or, unset, as its folder says (local lakes)."""
        if self.lake.format is not None or "://" in self.lake.path:
            return self.lake.format or NEW_TABLES
        return format_of(self.lake, table.name)

    def lake_table_name(self, table: TableSpec) -> str:
        """The table's identifier in the Iceberg catalog: `<lake.namespace>.<name>`, the name
        joining the asset key's parts with `__` (the op name)."""
        return f"{self.lake.namespace}.{'__'.join(table.asset_key_path)}"

    def asset_key(self, table: TableSpec) -> dg.AssetKey:
        """The table's asset key, as `get_asset_spec` gives it."""
        return self.get_asset_spec(table).key

    def op_name(self, table: TableSpec) -> str:
        """The op in run config: `--config-json '{"ops": {"<this>": {"config": ...}}}'`."""
        return op_name_of(self.asset_key(table))

    def schedule_name(self, table: TableSpec) -> str:
        """The table's schedule (`schedule:`): `<op name>_schedule`."""
        return f"{self.op_name(table)}_schedule"

    def key_audit_schedule_name(self, table: TableSpec) -> str:
        """The schedule of the table's whole-lake key audit (`checks.key_audit`)."""
        return f"{self.op_name(table)}_key_audit"

    def sensor_name(self, table: TableSpec) -> str:
        """The table's source-change sensor (`sensor:`)."""
        return sensor_name_of(self.asset_key(table))

    def pool(self, table: TableSpec) -> str:
        """The Dagster concurrency pool of the table's runs (limit it to 1 on object stores)."""
        return f"incremental_assets/{table.name}"

    @property
    def job_name(self) -> str:
        """The job that materializes every table of the project."""
        return ALL_TABLES_JOB + self.suffix

    @property
    def automation_sensor_name(self) -> str:
        """The project's automation sensor (`automation:` on any table)."""
        return AUTOMATION_SENSOR + self.suffix

    def automation_condition(self, table: TableSpec) -> dg.AutomationCondition[Any] | None:
        """The table's Dagster automation condition, from its `automation:` setting."""
        if table.automation is None:
            return None
        if table.automation in ("eager", "on_missing"):
            return self.never_materialized(table.automation)
        return dg.AutomationCondition.on_cron(table.automation)

    def never_materialized(self, label: str) -> dg.AutomationCondition[Any]:
        """Once, when the table has never been materialized.

        A table has no upstream assets, so `eager` can only mean this too. Dagster's own
        `on_missing()` and `eager()` count the first evaluation as handled, so a table that is
        already missing when the condition first runs would never be requested.
        """
        handled = dg.AutomationCondition.newly_requested() | dg.AutomationCondition.newly_updated()
        missing = dg.AutomationCondition.missing().newly_true().since(handled)
        return (missing & ~dg.AutomationCondition.in_progress()).with_label(label)

    def source_text(self, table: TableSpec) -> str:
        """The source as the asset's metadata shows it: the database URL and table, or the files."""
        if isinstance(table.source, JdbcSourceSpec):
            what = f"the query of table {table.name}" if table.query else table.table
            return f"{what} in {table.source.redacted_url()}"
        return f"{table.source.format} files at {table.source.path}/{table.table}"

    def describe(self, table: TableSpec) -> str:
        """The asset's description when the table sets none: mode, key, cursor and source."""
        if table.cursor is None:
            how = "Fully refreshed on every run (no cursor)"
        else:
            how = f"Loaded incrementally on cursor `{table.cursor.column}`"
        mode = {
            Mode.APPEND: "append (every row version kept once)",
            Mode.MERGE: f"merge on key ({', '.join(table.primary_key) or 'read from the database'})",
            Mode.FULL_REFRESH: "full refresh",
        }[table.mode]
        lake = "Iceberg table" if self.lake_format(table) == "iceberg" else "Parquet lake"
        return (
            f"{how} from {self.source_text(table)} into the {lake} at "
            f"{self.lake.table_uri(table.name)}; mode: {mode}."
        )


def op_name_of(key: dg.AssetKey) -> str:
    return "__".join(key.path)


def sensor_name_of(key: dg.AssetKey) -> str:
    """The source-change sensor of the asset `key`."""
    return f"{op_name_of(key)}_source_sensor"


def translator_for(project: Project, suffix: str = "") -> IncrementalAssetsTranslator:
    """The translator the configuration names (`translator:`), or the default one."""
    if project.translator is None:
        return IncrementalAssetsTranslator(project.lake, suffix)
    module, _, name = project.translator.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _bad_translator(project, f"can't be imported ({exc})") from None
    if not (isinstance(found, type) and issubclass(found, IncrementalAssetsTranslator)):
        raise _bad_translator(project, "is not a subclass of IncrementalAssetsTranslator")
    return found(project.lake, suffix)


def _bad_translator(project: Project, why: str) -> ConfigError:
    message = (
        f"'{project.translator}' {why}; name a subclass of "
        "incremental_assets.IncrementalAssetsTranslator as package.module.Class"
    )
    return ConfigError(problems=[Problem("top level", "translator", message)], file=project.path)
