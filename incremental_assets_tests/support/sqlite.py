"""SQLite without fsync in the test process: what a test's files on a RAM disk would give.

Dagster's instance on disk (SQLite in WAL mode) opens a connection for every event it stores, and
each commit, then each close (its checkpoint), waits for the disk: about half of a small run's
time on a busy machine's disk. `PRAGMA synchronous=OFF` leaves out those waits only: the writes,
their atomicity, the locks between connections and processes, and what survives a process
killed at any point are the same (the operating system still holds every write); only a power
loss could lose the last ones. Subprocesses (the Dagster CLI, the daemon, the UI) keep SQLite's
defaults.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


def _no_sync(dbapi_connection: Any, _record: Any) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")


def skip_sqlite_syncs() -> None:
    """Every SQLite connection SQLAlchemy opens in this process from now on skips fsync."""
    if not event.contains(Engine, "connect", _no_sync):
        event.listen(Engine, "connect", _no_sync)
