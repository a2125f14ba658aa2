"""Named places where a run can be told to stop and wait, so crash tests can kill it there.

Set INCREMENTAL_ASSETS_PAUSE_AT=<name>:<marker file>. On reaching <name>, the process writes its
pid to the marker file and sleeps until it is killed, or until the marker file is removed, when
it goes on. Unset (always, in production), a pause point costs one environment lookup.

    session      the run has its Spark session, and has not used it yet
    staged       Spark has written the run's files to _staging/, nothing is committed
    mid-commit   the journal is written and the first file renamed into the table
    committed    the lake commit is done, the materialization is not yet recorded
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "INCREMENTAL_ASSETS_PAUSE_AT"


def pause_point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, marker = wanted.partition(":")
    if point != name:
        return
    Path(marker).write_text(str(os.getpid()))
    while Path(marker).exists():
        time.sleep(0.2)
