"""The model-based test within `make test`'s budget: a few short examples per mode family.

Fixed seeds keep it reproducible; `make soak` runs the same machine for as long as asked. A
failure prints the sequence of steps (not shrunk here, to stay within the budget; the soak
shrinks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.machine import Env, run_machine
from incremental_assets_tests.postgres import PostgresServer

# (modes, seed, examples, steps per example): about a minute each on two busy cores.
BUDGETS = {
    "merge": (("merge",), 20250101, 3, 14),
    "append": (("append",), 20250102, 3, 14),
    "full_refresh": (("full_refresh",), 20250103, 2, 10),
}


@pytest.mark.parametrize("family", list(BUDGETS))
def test_random_sequences_keep_the_lake_true_to_the_source(
    family: str,
    tmp_path: Path,
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
) -> None:
    modes, seed, examples, steps = BUDGETS[family]
    env = Env(postgres, spark_resource, tmp_path, modes=modes)
    run_machine(env, seed_value=seed, examples=examples, steps=steps, shrink=False)
