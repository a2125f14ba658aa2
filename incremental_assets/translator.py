"""Table config -> AssetSpec. Subclass and override `get_asset_spec` to change keys, groups, tags."""

from __future__ import annotations

import dagster as dg

from incremental_assets.config import JdbcSourceSpec, LakeSpec, Mode, TableSpec


class IncrementalAssetsTranslator:
    def __init__(self, lake: LakeSpec) -> None:
        self.lake = lake

    def get_asset_spec(self, table: TableSpec) -> dg.AssetSpec:
        return dg.AssetSpec(
            key=dg.AssetKey(list(table.asset_key_path)),
            group_name=table.source.name,
            kinds={"spark", table.source.kind, "parquet"},
            description=table.description or self.describe(table),
            metadata={
                "dagster/uri": dg.MetadataValue.text(self.lake.table_uri(table.name)),
                "mode": table.mode.value,
                "cursor_column": table.cursor.column if table.cursor else "",
                "source": self.source_text(table),
            },
            tags={"incremental_assets/mode": table.mode.value},
            automation_condition=self.automation_condition(table),
            freshness_policy=(
                dg.FreshnessPolicy.time_window(fail_window=table.freshness)
                if table.freshness
                else None
            ),
        )

    def automation_condition(self, table: TableSpec) -> dg.AutomationCondition | None:
        if table.automation is None:
            return None
        if table.automation in ("eager", "on_missing"):
            return self.never_materialized(table.automation)
        return dg.AutomationCondition.on_cron(table.automation)

    def never_materialized(self, label: str) -> dg.AutomationCondition:
        """Once, when the table has never been materialized.

        A table has no upstream assets, so `eager` can only mean this too. Dagster's own
        `on_missing()` and `eager()` count the first evaluation as handled, so a table that is
        already missing when the condition first runs would never be requested.
        """
        handled = dg.AutomationCondition.newly_requested() | dg.AutomationCondition.newly_updated()
        missing = dg.AutomationCondition.missing().newly_true().since(handled)
        return (missing & ~dg.AutomationCondition.in_progress()).with_label(label)

    def source_text(self, table: TableSpec) -> str:
        if isinstance(table.source, JdbcSourceSpec):
            what = f"the query of table {table.name}" if table.query else table.table
            return f"{what} in {table.source.redacted_url()}"
        return f"{table.source.format} files at {table.source.path}/{table.table}"

    def describe(self, table: TableSpec) -> str:
        if table.cursor is None:
            how = "Fully refreshed on every run (no cursor)"
        else:
            how = f"Loaded incrementally on cursor `{table.cursor.column}`"
        mode = {
            Mode.APPEND: "append (every row version kept once)",
            Mode.MERGE: f"merge on key ({', '.join(table.primary_key) or 'read from the database'})",
            Mode.FULL_REFRESH: "full refresh",
        }[table.mode]
        return (
            f"{how} from {self.source_text(table)} into the Parquet lake at "
            f"{self.lake.table_uri(table.name)}; mode: {mode}."
        )
