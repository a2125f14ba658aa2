"""Table config -> AssetSpec, and every name derived from it.

The translator owns the names: asset keys (the lake tables' and their sources'), op names, the
job, schedule and sensor names, the pools, the links to the documentation. Everything else (the
factory, schedules, sensors, the CLI, the tests) asks it. Subclass it and override
`get_asset_spec` (the lake table) or `get_source_asset_spec` (the source table it reads) to change
keys, groups or tags, then name the subclass in the configuration
(`translator: my_package.MyTranslator`), so that the assets and the `incremental-assets` command
agree.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from typing import Any

import dagster as dg

from incremental_assets.config import JdbcSourceSpec, LakeSpec, Mode, Project, TableSpec
from incremental_assets.errors import ConfigError, Problem
from incremental_assets.lake import NEW_TABLES, format_of
from incremental_assets.metadata import TABLE_NAME, URI
from incremental_assets.settings import settings_digest

ALL_TABLES_JOB = "incremental_assets_all"
AUTOMATION_SENSOR = "incremental_assets_automation_sensor"
# Named for what its runs do: the Runs page shows it as what launched them ("Launched by").
CHECKS_SENSOR = "incremental_assets_mark_checks_skipped"
POOL_GUARD_SENSOR = "incremental_assets_pool_guard"
MAINTENANCE_JOB = "incremental_assets_maintenance"
TABLE_METADATA_KEY = "incremental_assets/table"
# Ends the last part of a source table's asset key (`shop/public/orders_source`): Dagster's graph
# shows only that part, which would otherwise read as the lake table's name.
SOURCE_SUFFIX = "_source"
# Dagster's kind for a database source (its icon in the UI); a files source is `files`.
SOURCE_KINDS = {"postgres": "postgres", "mysql": "mysql"}
# Where the documentation (the repository's docs/ folder) is published, for the UI's links, or
# None: the UI names the file instead. Dagster's UI links only to http(s) addresses.
DOCS_URL: str | None = None
MOVING_THE_CURSOR = ("operations.md", "moving-the-cursor-by-hand", "Moving the cursor by hand")


class IncrementalAssetsTranslator:
    """Every name and spec derived from a table's configuration.

    Override `get_asset_spec` for keys, groups, kinds, tags and metadata, and
    `get_source_asset_spec` for the source table's upstream asset; the other names (op, schedule,
    sensor, pool, Iceberg identifier, the lake table's dependency on its source) follow these
    keys, so they follow an override. `docs_url` says where the UI's links point.
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
            # The lake side only: the source's kind is its own asset's.
            kinds={"spark", lake_format},
            deps=[self.source_asset_key(table)],
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

    def get_source_asset_spec(self, table: TableSpec) -> dg.AssetSpec:
        """The source table `table` reads, as an upstream asset: external (Dagster never
        materializes it; the source sensor records observations of it), in the table's group, of
        the source's kind (`postgres`, `mysql` for MySQL and MariaDB, `files`). The one override
        point for its key, group, kind and metadata; the lake table's asset depends on its key.

        Its key is `[*key_prefix, <source>, *<the table's name in the source>]`, each part made a
        valid Dagster name and the last one ending in `_source` (`shop/public/orders_source`,
        `landing/events_source`; a query's is `<source>/<table>_query`): Dagster's graph and
        lists show a key's last part, which then tells the source from its lake table at a
        glance. Stable, and the same for two tables reading one source table, which share the
        asset.
        """
        metadata: dict[str, dg.MetadataValue | str] = {"source": self.source_text(table)}
        if isinstance(table.source, JdbcSourceSpec):
            kind = SOURCE_KINDS.get(table.source.kind, table.source.kind)
            metadata[URI] = dg.MetadataValue.text(table.source.redacted_url())
            if table.table is not None and table.query is None:
                metadata[TABLE_NAME] = dg.MetadataValue.text(table.table)
            what = "the query" if table.query is not None else f"the table {table.table}"
        else:
            kind = "files"
            metadata[URI] = dg.MetadataValue.text(f"{table.source.path}/{table.table}")
            what = f"the {table.source.format} files {table.table}"
        origin = table.source.redacted_url() if isinstance(table.source, JdbcSourceSpec) else ""
        return dg.AssetSpec(
            key=dg.AssetKey([*table.key_prefix, *_source_key_parts(table)]),
            group_name=table.source.name,
            kinds={kind},
            description=(
                f"{what[0].upper()}{what[1:]} of source {table.source.name}"
                f"{' (' + origin + ')' if origin else ''}, which incremental_assets reads and "
                "never writes."
            ),
            metadata=metadata,
        )

    def source_sensor_help(self, table: TableSpec) -> str:
        """What records the source asset's observations, and how to switch it on (markdown):
        the definitions add it to the source asset's description."""
        sensor = self.sensor_name(table)
        return (
            f"Its observations say how far the source is ahead of the lake; the sensor "
            f"`{sensor}` records them while it runs. Sensors start stopped unless the table's "
            "configuration says `sensor: true`: start it on the UI's Automation page, or with "
            f"`dagster sensor start {sensor}`."
        )

    def source_asset_key(self, table: TableSpec) -> dg.AssetKey:
        """The key of the table's source asset, as `get_source_asset_spec` gives it."""
        return self.get_source_asset_spec(table).key

    def docs_url(self, page: str, anchor: str = "") -> str | None:
        """The address of `docs/<page>#<anchor>` where the documentation is published
        (`DOCS_URL`), or None: the UI then names the file and its section instead of linking.

        Override it to point at your own copy of the documentation.
        """
        if DOCS_URL is None:
            return None
        return f"{DOCS_URL.rstrip('/')}/{page}" + (f"#{anchor}" if anchor else "")

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

    def maintenance_op_name(self, table: TableSpec) -> str:
        """The table's op in the maintenance job (`lake.maintenance: scheduled`)."""
        return f"{self.maintenance_job_name}__{self.op_name(table)}"

    def pool(self, table: TableSpec) -> str:
        """The Dagster concurrency pool of the table's runs (limit it to 1 on object stores)."""
        return f"incremental_assets/{table.name}"

    @property
    def job_name(self) -> str:
        """The job that materializes every table of the project."""
        return ALL_TABLES_JOB + self.suffix

    @property
    def maintenance_job_name(self) -> str:
        """The job that keeps every Iceberg table (`lake.maintenance: scheduled`)."""
        return MAINTENANCE_JOB + self.suffix

    @property
    def maintenance_schedule_name(self) -> str:
        """The maintenance job's schedule (`lake.maintenance_schedule`)."""
        return f"{self.maintenance_job_name}_schedule"

    @property
    def automation_sensor_name(self) -> str:
        """The project's automation sensor (`automation:` on any table)."""
        return AUTOMATION_SENSOR + self.suffix

    @property
    def checks_sensor_name(self) -> str:
        """The project's sensor that marks skipped, in a checks-only run, the checks of a run
        that failed before it committed (Dagster shows them "Execution failed" until then)."""
        return CHECKS_SENSOR + self.suffix

    @property
    def pool_guard_sensor_name(self) -> str:
        """The project's sensor that frees the tables' pool slots held by runs that died."""
        return POOL_GUARD_SENSOR + self.suffix

    def automation_condition(self, table: TableSpec) -> dg.AutomationCondition[Any] | None:
        """The table's Dagster automation condition, from its `automation:` setting."""
        if table.automation is None:
            return None
        if table.automation in ("eager", "on_missing"):
            return self.never_materialized(table.automation)
        return self.after_cron_tick(table.automation)

    def after_cron_tick(self, cron: str) -> dg.AutomationCondition[Any]:
        """Once after each tick of `cron` (UTC).

        Dagster's `on_cron()` also waits for every upstream asset to update after the tick; a
        table's only upstream asset is its source, which Dagster never materializes.
        """
        passed: dg.AutomationCondition[Any] = dg.AutomationCondition.cron_tick_passed(cron)
        tick = passed.since_last_handled()
        return (dg.AutomationCondition.in_latest_time_window() & tick).with_label(
            f"on_cron({cron})"
        )

    def never_materialized(self, label: str) -> dg.AutomationCondition[Any]:
        """Once, when the table has never been materialized.

        A table's only upstream asset is its source, which Dagster never materializes, so `eager`
        can only mean this too. Dagster's own
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
            Mode.MERGE: (
                f"merge on key ({', '.join(table.primary_key) or 'read from the database'})"
            ),
            Mode.FULL_REFRESH: "full refresh",
        }[table.mode]
        lake = "Iceberg table" if self.lake_format(table) == "iceberg" else "Parquet lake"
        text = (
            f"{how} from {self.source_text(table)} into the {lake} at "
            f"{self.lake.table_uri(table.name)}; mode: {mode}."
        )
        if table.cursor is None:
            return text
        return f"{text}\n\n{self.cursor_help(table)}"

    def cursor_help(self, table: TableSpec) -> str:
        """Where to see the cursor the next run reads from, and how to move it (markdown)."""
        page, anchor, title = MOVING_THE_CURSOR
        docs = self.docs_url(page, anchor)
        how = f" ([{title.lower()}]({docs}))" if docs else f" (docs/{page}, *{title}*)"
        return (
            "The cursor the next run reads from is the latest materialization's `cursor`, or, "
            "after a `cursor set|reset`, its observation's (the Events tab says what the next "
            f"run reads). Move it with "
            f'`incremental-assets cursor set {table.name} <value> --reason "..."`, or '
            f'`incremental-assets cursor reset {table.name} --reason "..."` to reload '
            f"everything{how}."
        )


def _source_key_parts(table: TableSpec) -> list[str]:
    """`<source>` then the table's name in the source, split at its dots (a database table) or
    slashes (files), each part a valid Dagster name, the last one ending in `_source`; a query's
    `<table>_query`."""
    if isinstance(table.source, JdbcSourceSpec) and table.query is not None:
        return [_key_part(table.source.name), _key_part(f"{table.name}_query")]
    if isinstance(table.source, JdbcSourceSpec):
        parts = _split_name(table.table or table.name, ".")
    else:
        parts = [p for p in (table.table or "").split("/") if p] or [table.name]
    named = [_key_part(table.source.name), *(_key_part(p) for p in parts)]
    return [*named[:-1], f"{named[-1]}{SOURCE_SUFFIX}"]


def _split_name(text: str, separator: str) -> list[str]:
    """`schema.table` split at the separators outside quotes (`"a.b".c`), the quotes removed."""
    parts, current, quote = [], "", ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
            else:
                current += char
        elif char in '"`':
            quote = char
        elif char == separator:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in [*parts, current] if p]


def _key_part(text: str) -> str:
    """`text` as a Dagster name: characters other than letters, digits and `_` become `_`, and a
    name changed so ends with a digest of the original (`order-items` -> `order_items_1a2b3c`),
    so two names differing only there stay apart; the same text always gives the same part."""
    part = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if part == text:
        return part
    return f"{part}_{hashlib.md5(text.encode()).hexdigest()[:6]}"


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
