"""A Dagster code location whose one asset holds the pool `incremental_assets/orders` until it is
killed: a run that dies holding a table's slot, with no Spark to wait for (`dagster asset
materialize -f` this file). The run writes its pid to $POOL_HOLDER_MARKER once it has the slot.
With POOL_HOLDER_EXECUTOR=dagster it runs under Dagster's own executor, so it records nothing of
its process, as a run of an older version of the package would.
"""

import os
import time
from pathlib import Path

import dagster as dg

from incremental_assets.pool_slots import in_process_executor

POOL = "incremental_assets/orders"


@dg.asset(pool=POOL)
def holder() -> None:
    Path(os.environ["POOL_HOLDER_MARKER"]).write_text(str(os.getpid()))
    time.sleep(3600)


defs = dg.Definitions(
    assets=[holder],
    executor=dg.in_process_executor
    if os.environ.get("POOL_HOLDER_EXECUTOR") == "dagster"
    else in_process_executor,
)
