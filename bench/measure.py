"""Measure one run: wall time, CPU of a process tree and of the PostgreSQL server, peak memory.

CPU comes from /proc: for every live process of a tree, its own user+system time plus that of the
children it has reaped (so work done by exited processes, such as PostgreSQL backends that served
a connection and quit, is counted once). Peak memory is the tree's summed RSS, sampled every
50 ms.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from #3 on; the name may hold spaces


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def tree(root: int) -> list[int]:
    children, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(root: int) -> float:
    total = 0
    for pid in tree(root):
        fields = _stat(pid)
        if fields:  # utime, stime, cutime, cstime are fields 14-17
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / _TICKS


def rss_bytes(root: int) -> int:
    total = 0
    for pid in tree(root):
        fields = _stat(pid)
        if fields:
            total += int(fields[21]) * _PAGE  # rss in pages is field 24
    return total


@dataclass
class Sample:
    wall: float = 0.0
    cpu_client: float = 0.0
    cpu_server: float = 0.0
    peak_rss: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@contextmanager
def measured(server_pid: int | None, client_pid: int | None = None) -> Iterator[Sample]:
    """Measure the block: this process's tree (or `client_pid`'s) and the server's."""
    client = client_pid or os.getpid()
    sample = Sample()
    done = threading.Event()

    def watch_memory() -> None:
        while not done.wait(0.05):
            sample.peak_rss = max(sample.peak_rss, rss_bytes(client))

    watcher = threading.Thread(target=watch_memory, daemon=True)
    cpu_client, cpu_server = cpu_seconds(client), cpu_seconds(server_pid) if server_pid else 0.0
    started = time.perf_counter()
    watcher.start()
    try:
        yield sample
    finally:
        sample.wall = time.perf_counter() - started
        done.set()
        watcher.join()
        sample.peak_rss = max(sample.peak_rss, rss_bytes(client))
        sample.cpu_client = cpu_seconds(client) - cpu_client
        sample.cpu_server = (cpu_seconds(server_pid) - cpu_server) if server_pid else 0.0
