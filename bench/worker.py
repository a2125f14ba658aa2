"""One engine in its own process, so its CPU and memory are measured alone.

    python -m bench.worker ENGINE WORKDIR PG_URL POSTMASTER_PID JDBC_JSON [SETTINGS_JSON]

Reads one JSON command per line ({"op": "full" | "incremental" | "merge" | ..., "since": ...,
"args": {...}}), runs it under `measured`, says `{"done": op}` once the clock has stopped, then
answers with one JSON line: the op's result, with what the table holds where the engine can say
(ours: `table_state`, read after the clock, as `table`).
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
        operation = getattr(engine, command["op"])
        with measured(int(server_pid) if server_pid != "0" else None) as sample:
            result = operation(command.get("since"), **command.get("args", {}))
        print(json.dumps({"done": command["op"]}), flush=True)  # before the table's state is read
        result.update(
            wall=sample.wall,
            cpu_client=sample.cpu_client,
            cpu_server=sample.cpu_server,
            peak_rss=sample.peak_rss,
        )
        if hasattr(engine, "table_state"):
            result["table"] = engine.table_state()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
