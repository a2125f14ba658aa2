"""Materializing tables in this process, as `incremental-assets run` does: the project's own job,
its steps under the pool guard (`pool_slots.guarding`), which Dagster's `execute_in_process`
would otherwise skip (it runs its own executor, not the job's).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from incremental_assets.config import Project, TableSpec
from incremental_assets.definitions import build_definitions
from incremental_assets.pool_slots import guarding, worker_tags
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import translator_for


def materialize_tables(
    project: Project,
    tables: Sequence[TableSpec],
    instance: dg.DagsterInstance,
    *,
    op_config: Mapping[str, Any] | None = None,
    spark: IncrementalSparkResource | None = None,
    loggers: Mapping[str, dg.LoggerDefinition] | None = None,
    say: Callable[[str], None] = print,
) -> dg.ExecuteInProcessResult:
    """One run of `tables` (each with `op_config`), recorded in `instance`: the project's assets
    and checks, with `spark` (else the project's own resource) and `loggers` (each configured
    empty); `say` hears what the pool guard does."""
    translator = translator_for(project)
    defs = build_definitions(project, translator, spark)
    if loggers:
        defs = dg.Definitions.merge(defs, dg.Definitions(loggers=dict(loggers)))
    run_config: dict[str, Any] = {"loggers": {key: {} for key in loggers or ()}}
    if op_config:
        run_config["ops"] = {translator.op_name(t): {"config": dict(op_config)} for t in tables}
    run_id = str(uuid.uuid4())
    with guarding(instance, run_id, {translator.pool(t) for t in tables}, say):
        return defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            asset_selection=[translator.asset_key(t) for t in tables],
            run_config=run_config,
            raise_on_error=False,
            run_id=run_id,
            tags=worker_tags(),
        )
