"""The model-based test within `make test`'s budget: a few short examples per mode family.

Fixed seeds keep it reproducible; `make soak` runs the same machine for as long as asked (and
with runs killed in subprocesses in every family). A failure prints the steps that reproduce it,
not shrunk here to stay within the budget (the soak shrinks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.machine import Env, run_machine
from incremental_assets_tests.postgres import PostgresServer

# family: (modes, seed, examples, steps per example, killed runs per example). About a minute
# each on two busy cores; only the merge family starts the Spark Connect server killed runs need.
BUDGETS = {
    "merge": (("merge",), 20251101, 3, 14, 1),
    "append": (("append",), 20251102, 3, 14, 0),
    "full_refresh": (("full_refresh",), 20251103, 2, 10, 0),
}


@pytest.mark.parametrize("family", list(BUDGETS))
def test_random_sequences_keep_the_lake_true_to_the_source(
    family: str,
    tmp_path: Path,
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
    request: pytest.FixtureRequest,
) -> None:
    modes, seed, examples, steps, kills = BUDGETS[family]
    connect = request.getfixturevalue("connect") if kills else None
    env = Env(
        postgres, spark_resource, tmp_path, connect=connect, modes=modes, kills=kills, verbose=True
    )
    run_machine(env, seed_value=seed, examples=examples, steps=steps, shrink=False)
