"""The object-store engine's lake: a bucket of moto's S3 server, the catalog SQLite on local disk.

The harness starts moto (incremental_assets_tests/support/s3.py: a real S3 API on a free
127.0.0.1 port) in its own process, so moto's CPU and memory are not counted as the engine's:
`ours_iceberg_s3`'s worker reads and writes every object over HTTP, as it would S3's, and its
catalog is a SQLite file on the local disk (`lake.catalog: {type: sql, uri: sqlite:///...}` with
the `s3.*` properties Iceberg's S3FileIO and PyIceberg take). moto is functional, not S3: it
answers from memory on the same machine, with none of S3's latency, so these figures say that
the lake works on an object store and how its costs grow with the objects it holds, not what S3
would cost. The requests moto answers are counted by kind (`Requests`), per run of the engine
(bench/run.py's worker hands them over after the run's clock stops, before the table's state
is read).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINE = "ours_iceberg_s3"
BUCKET = "bench-lake"
# The request line of werkzeug's access log, as moto's server writes it (maybe in ANSI colours).
_REQUEST = re.compile(r'"(?:\x1b\[[\d;]*m)*([A-Z]+) (\S+)')


class Requests(logging.Handler):
    """The requests moto's server answers, counted by kind (GET, LIST, HEAD, PUT, POST, DELETE)
    from its access log, which this handler takes over (nothing is printed)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        found = _REQUEST.search(record.getMessage())
        if found is None:
            return
        method, path = found.groups()
        kind = "LIST" if method == "GET" and "list-type=" in path else method
        with self._lock:
            self.counts[kind] += 1

    def take(self) -> dict[str, int]:
        """The requests counted since the last call."""
        with self._lock:
            taken = dict(self.counts)
            self.counts.clear()
        return taken


@dataclass(frozen=True)
class S3Lake:
    settings: dict[str, Any]  # the worker's `lake` settings
    requests: Requests


@contextmanager
def s3_lake(workdir: Path) -> Iterator[S3Lake]:
    """moto's server, running until the block ends, its requests counted, and the `lake`
    settings of a lake in a new bucket of it."""
    from incremental_assets_tests.support.s3 import s3_server

    requests = Requests()
    log = logging.getLogger("werkzeug")
    # werkzeug adds a handler printing to stderr only where the logger has none of its level.
    log.setLevel(logging.INFO)
    log.addHandler(requests)
    log.propagate = False
    try:
        with s3_server() as server:
            bucket = server.bucket(BUCKET)
            workdir.mkdir(parents=True, exist_ok=True)
            settings = {
                "path": f"{bucket}/lake",
                "format": "iceberg",
                "catalog": server.catalog(type="sql", uri=f"sqlite:///{workdir}/s3_catalog.db"),
            }
            yield S3Lake(settings, requests)
    finally:
        log.removeHandler(requests)
