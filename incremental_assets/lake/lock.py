"""The writer lock of a lake table on a POSIX file system: an OS file lock on `<table>/_lock`.

It is released by the kernel if the process dies, and it only works where the lake is a local or
shared POSIX file system. On object stores it does nothing: there an Iceberg commit is refused
unless the table is still where the run read it (`lake/iceberg/commits.py`), and a plain Parquet
lake relies on Dagster's concurrency pool of one run per table.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import IO

from incremental_assets.errors import ConcurrentRunError, TableProblem
from incremental_assets.lake.files import ParquetFolder

LOCK = "_lock"


@contextlib.contextmanager
def folder_lock(
    folder: ParquetFolder, table_name: str, owner: str, timeout: timedelta
) -> Iterator[None]:
    """Hold the table's writer lock; wait up to `timeout`, then fail naming the holder."""
    if not folder.is_local:
        yield
        return
    folder.fs.create_dir(folder.path, recursive=True)
    with open(folder.join(LOCK), "a+") as handle:
        _acquire(handle, folder, table_name, timeout)
        handle.seek(0)
        handle.truncate()
        since = f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
        handle.write(f"{owner} (pid {os.getpid()} on {socket.gethostname()}, since {since})")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[str], folder: ParquetFolder, table_name: str, timeout: timedelta) -> None:
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
    with open(folder.join(LOCK)) as reader:
        holder = reader.read().strip() or "another process"
    raise ConcurrentRunError(
        TableProblem(
            table_name,
            f"another run is writing {folder.uri} and still holds its lock after {timeout}: "
            f"{holder}.",
            fix="wait for that run to finish, or raise lake.lock_timeout to queue behind it.",
        )
    )
