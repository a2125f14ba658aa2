"""One engine in its own process, so its CPU and memory are measured alone.

    python -m bench.worker ENGINE WORKDIR PG_URL POSTMASTER_PID JDBC_JSON [SETTINGS_JSON]

Reads one JSON command per line ({"op": "full" | "incremental" | "merge" | ..., "since": ...}),
runs it under `measured`, and answers with one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bench.engines import ENGINES
from bench.measure import measured


def main() -> None:
    name, workdir, pg_url, server_pid, jdbc = sys.argv[1:6]
    settings = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    Path(workdir).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    extra = {"settings": settings} if settings else {}
    engine = ENGINES[name](Path(workdir), pg_url, json.loads(jdbc), **extra)
    print(json.dumps({"ready": name, "startup": time.perf_counter() - started}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        with measured(int(server_pid) if server_pid != "0" else None) as sample:
            result = getattr(engine, command["op"])(command.get("since"))
        result.update(
            wall=sample.wall,
            cpu_client=sample.cpu_client,
            cpu_server=sample.cpu_server,
            peak_rss=sample.peak_rss,
        )
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
