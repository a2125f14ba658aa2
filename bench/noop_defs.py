"""Dagster's floor: one asset that does nothing, for the end-to-end benchmark.

    DAGSTER_MODULE_NAME=bench.noop_defs dagster asset materialize --select noop

What a fresh `dagster asset materialize` of this asset costs (the interpreter, importing Dagster,
loading definitions, opening the instance, the run and its event log) is the least any Dagster
asset pays per run. It runs in process, as the project's own runs do, so that no step subprocess
is counted that the project does not start either.
"""

from __future__ import annotations

import dagster as dg


@dg.asset
def noop() -> None:
    """Nothing at all: the run around it is the whole cost."""


defs = dg.Definitions(assets=[noop], executor=dg.in_process_executor)
