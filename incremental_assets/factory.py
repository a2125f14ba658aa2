"""One Dagster asset per table: a thin shell around `load.run_incremental_load`.

The asset takes the table's lake lock, reads the stored state, runs the load and yields the
materialization *while still holding the lock*: Dagster stores the event before the generator
resumes, so a second run that was waiting for the lock always sees the first run's cursor.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import Field

from incremental_assets.errors import IncrementalAssetsError, InstanceError
from incremental_assets.load import LoadRequest, run_incremental_load
from incremental_assets.pause_points import pause_point
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.spec import Project, TableSpec
from incremental_assets.state import metadata_for, read_stored_state
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets.writers.lake import LakeTable

ALLOW_TEMPORARY_INSTANCE = "INCREMENTAL_ASSETS_ALLOW_TEMPORARY_INSTANCE"
_TEMPORARY_HOME_PREFIX = ".tmp_dagster_home_"


class TableRunConfig(dg.Config):
    full_refresh: bool = Field(
        default=False,
        description="Ignore the stored cursor and replace the lake table with everything the "
        "source holds (from `start`, if set). The new cursor replaces the old one only if the "
        "run succeeds.",
    )


def op_name_for(spec: dg.AssetSpec) -> str:
    """The op name to use in run config: `--config-json '{"ops": {"<this>": {"config": ...}}}'`."""
    return "__".join(spec.key.path)


def build_table_asset(
    project: Project, table: TableSpec, translator: IncrementalAssetsTranslator
) -> dg.AssetsDefinition:
    spec = translator.get_asset_spec(table)

    @dg.multi_asset(specs=[spec], name=op_name_for(spec), pool=f"incremental_assets/{table.name}")
    def load_table(
        context: dg.AssetExecutionContext, config: TableRunConfig, spark: IncrementalSparkResource
    ) -> Iterator[dg.MaterializeResult]:
        lake = LakeTable(project.lake.table_uri(table.name))
        with failing_cleanly():
            ensure_persistent_instance(context.instance, table.name)
            owner = f"run {context.run_id}"
            with lake.lock(table.name, owner, project.lake.lock_timeout):
                stored = read_stored_state(context.instance, spec.key)
                request = LoadRequest(table, project.lake, stored, full_refresh=config.full_refresh)
                result = run_incremental_load(spark.spark_session, request, log=context.log.info)
                pause_point("committed")
                context.log.info(
                    f"{table.name}: {result.rows_extracted} rows extracted, {result.rows_written} "
                    f"written in {result.extract_seconds:.1f}s + {result.write_seconds:.1f}s; "
                    f"cursor {result.previous_cursor} -> {result.cursor}"
                )
                yield dg.MaterializeResult(asset_key=spec.key, metadata=metadata_for(result))

    return load_table


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Our errors become a Dagster Failure carrying just the message, without the chain."""
    try:
        yield
    except IncrementalAssetsError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None


def ensure_persistent_instance(instance: dg.DagsterInstance, table_name: str) -> None:
    """Refuse an instance that forgets cursors, unless the user said that is fine."""
    if os.environ.get(ALLOW_TEMPORARY_INSTANCE, "").lower() in ("1", "true", "yes"):
        return
    root = getattr(instance, "root_directory", "") or ""
    temporary = instance.is_ephemeral or (
        not os.environ.get("DAGSTER_HOME")
        and os.path.basename(root).startswith(_TEMPORARY_HOME_PREFIX)
    )
    if temporary:
        raise InstanceError(
            f"Table '{table_name}': this run uses a temporary Dagster instance (DAGSTER_HOME is not "
            "set), which forgets every cursor when the process exits, so each run would reload "
            "the whole table. Set DAGSTER_HOME to a directory that persists (for example: export "
            "DAGSTER_HOME=$PWD/.dagster_home; mkdir -p $DAGSTER_HOME), or set "
            f"{ALLOW_TEMPORARY_INSTANCE}=1 to accept full reloads."
        )
