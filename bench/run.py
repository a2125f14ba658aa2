"""The benchmark: every scenario, every engine, the same data, the same machine, the same run.

    python -m bench.run                 # 10M rows, 5 repetitions, writes BENCHMARKS.md
    python -m bench.run --rows 1000000  # the quick size
    python -m bench.run --smoke         # 10k rows, one repetition, 3 A50 merges
    python -m bench.run --no-end-to-end # the in-process scenarios only
    python -m bench.run --no-mysql      # without the MySQL phase
    python -m bench.run --only-a50 --engines ours_iceberg,ours_iceberg_s3   # A50 alone

Scenarios (each engine sees exactly the same source changes):
  S1  full load (after one first load per engine, reported apart as "S1 first")
  S0  an incremental run with no changes (the fixed cost)
  S2  an incremental run after 0.1% of the rows changed (half inserts, half updates)
  S3  the same after 10% changed
  S4  a merge of 1% updates, clustered on the most recent ids, then spread uniformly. Plain
      Parquet gives the peers no merge: they read the same delta and append it, so their figure is
      what extracting the delta costs, and ours adds what applying it costs
  A50 read amplification: 50 (--a50-merges) merges of a different 1% each on the Iceberg
      engines, then full scans by Spark and PyIceberg against the same table compacted
      (bench/read_amplification.py)

Ours runs on each lake format: `ours` (plain Parquet), `ours_iceberg` (Iceberg, written by Spark
through the SQLite catalog) and `ours_iceberg_s3` (the same Iceberg lake in a bucket of moto's S3
server, bench/object_store.py: S1 and S4 and A50 only), each in its own worker, interleaved with
the peers run by run.

Then, unless --no-end-to-end, the end-to-end phase (bench/end_to_end.py): what a user pays, each
run a fresh `dagster asset materialize` process timed from outside (E1-E5, beside Dagster's floor
and the peers run the same way).

Then, unless --no-mysql, the MySQL phase (bench/mysql.py): S1 and S0 on a MariaDB server of
--mysql-rows rows, ours beside ConnectorX and dlt.

PostgreSQL is started from the local binaries (or INCREMENTAL_ASSETS_BENCH_PG names a server on
this machine). Results go to bench/results/<time>.json and, unless --smoke, to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg

from bench import data
from bench.end_to_end import run_end_to_end
from bench.engines import OURS
from bench.mysql import run_mysql
from bench.object_store import ENGINE as S3_ENGINE
from bench.object_store import Requests, s3_lake
from bench.previous import load_previous
from bench.read_amplification import run_read_amplification
from bench.report import write_report

ROOT = Path(__file__).resolve().parents[1]


class Worker:
    def __init__(
        self,
        name: str,
        workdir: Path,
        pg_url: str,
        server_pid: int,
        jdbc: dict[str, str],
        settings: dict[str, Any] | None = None,
        requests: Requests | None = None,
    ) -> None:
        """`requests`: the object store's request counter, whose counts during each op the
        results carry (`s3_requests`)."""
        self.name = name
        self.requests = requests
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.worker",
                name,
                str(workdir / name),
                pg_url,
                str(server_pid),
                json.dumps(jdbc),
                json.dumps(settings or {}),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.startup = float(self._read().get("startup", 0.0))

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the {self.name} worker stopped")
            if line.startswith("{"):
                return json.loads(line)  # type: ignore[no-any-return]

    def run(self, op: str, since: str, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        if self.requests is not None:
            self.requests.take()  # what came before (the last op's table state) isn't this op's
        self.process.stdin.write(json.dumps({"op": op, "since": since, "args": args}) + "\n")
        self.process.stdin.flush()
        done = self._read()
        assert done.get("done") == op, done
        requests = self.requests.take() if self.requests is not None else None
        result = self._read()
        if requests is not None:
            result["s3_requests"] = requests
        return result

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=120)


@contextmanager
def postgres() -> Iterator[tuple[str, dict[str, str]]]:
    external = os.environ.get("INCREMENTAL_ASSETS_BENCH_PG")
    if external:
        url = urlparse(external)
        yield (
            external,
            {
                "url": f"jdbc:postgresql://{url.hostname}:{url.port or 5432}{url.path}",
                "user": url.username or "",
                "password": url.password or "",
            },
        )
        return
    from incremental_assets_tests.support.postgres import postgres_server

    with postgres_server() as server:
        local = f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{server.dbname}"
        yield local, {"url": server.jdbc_url, "user": server.user, "password": server.password}


def postmaster_pid(conn: Any) -> int:
    (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone()
    try:
        with open(f"/proc/{backend}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0  # a server on another machine: its CPU can't be measured


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5, help="runs per in-process median")
    parser.add_argument(
        "--e2e-repeats", type=int, default=0, help="runs per end-to-end median (default: --repeats)"
    )
    parser.add_argument(
        "--engines",
        default="ours,ours_iceberg,ours_iceberg_s3,copy,adbc,dlt",
        help="ours (plain Parquet lake), ours_iceberg (Iceberg lake), ours_iceberg_s3 (Iceberg "
        "lake on moto's S3 server), copy, adbc, dlt",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="10k rows, one repetition, 3 A50 merges, no report by default",
    )
    parser.add_argument(
        "--a50-merges", type=int, default=50, help="A50: uniform 1%% merges before the scans"
    )
    parser.add_argument("--no-a50", action="store_true", help="skip the A50 phase")
    parser.add_argument(
        "--only-a50",
        action="store_true",
        help="the A50 phase alone (its first step loads the merge table whole), in process",
    )
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="the earlier run the report compares with (default: bench/previous.py's, by size)",
    )
    parser.add_argument(
        "--no-end-to-end",
        action="store_true",
        help="skip the end-to-end phase (fresh `dagster asset materialize` processes)",
    )
    parser.add_argument(
        "--only-end-to-end",
        action="store_true",
        help="skip the in-process scenarios (to work on the end-to-end phase)",
    )
    parser.add_argument(
        "--mysql-rows",
        type=int,
        default=1_000_000,
        help="the MySQL phase's table size (loading MariaDB is slower than PostgreSQL)",
    )
    parser.add_argument("--no-mysql", action="store_true", help="skip the MySQL phase")
    parser.add_argument(
        "--only-mysql", action="store_true", help="run the MySQL phase alone (no PostgreSQL)"
    )
    parser.add_argument("--out", type=Path, default=None, help="the results file (JSON)")
    parser.add_argument(
        "--report", type=Path, default=None, help="the report (default: BENCHMARKS.md)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.repeats, args.mysql_rows, args.a50_merges = 10_000, 1, 10_000, 3
    args.e2e_repeats = args.e2e_repeats or args.repeats
    engines = args.engines.split(",")
    started = datetime.now(UTC)
    out = args.out or ROOT / "bench" / "results" / f"{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "rows": args.rows,
        "repeats": args.repeats,
        "e2e_repeats": args.e2e_repeats,
        "started": started.isoformat(),
        "machine": _machine(),
        "command": " ".join(["python -m bench.run", *sys.argv[1:]]),
        "mysql": {},
        "a50_merges": 0 if args.no_a50 else args.a50_merges,
        "load": {"start": round(os.getloadavg()[0], 1)},
    }
    everything: dict[str, Any] = {"meta": meta, "results": [], "end_to_end": [], "mysql": []}

    def save(phase: str) -> None:
        """Write the results so far: a run stopped later still leaves its finished phases."""
        _fill_uncounted(everything["results"])
        meta["finished"] = datetime.now(UTC).isoformat()
        meta["load"][phase] = round(os.getloadavg()[0], 1)  # other work on the machine
        out.write_text(json.dumps(everything, indent=1))
        print(f"{phase} done; results so far: {out}", flush=True)

    if not args.only_mysql:
        postgres_phases(args, engines, everything, save)
    only = args.only_end_to_end or args.only_a50
    if args.only_mysql or (not args.no_mysql and not only and "ours" in engines):
        with tempfile.TemporaryDirectory(prefix="ia-bench-mysql-") as tmp:
            everything["mysql"], meta["mysql"] = run_mysql(
                args.mysql_rows, args.repeats, Path(tmp), Worker, engines
            )
        save("mysql")
    report = args.report or (None if args.smoke else ROOT / "BENCHMARKS.md")
    if report is not None:
        write_report(
            meta,
            everything["results"],
            report,
            everything["end_to_end"],
            everything["mysql"],
            previous=load_previous(args.previous, args.rows),
        )
        print(f"report: {report}")


def postgres_phases(
    args: argparse.Namespace,
    engines: list[str],
    everything: dict[str, Any],
    save: Callable[[str], None],
) -> None:
    """Generate `bench.orders` in PostgreSQL; the in-process scenarios, then the end-to-end ones."""
    with (
        postgres() as (pg_url, jdbc),
        psycopg.connect(pg_url, autocommit=True) as conn,
        tempfile.TemporaryDirectory(prefix="ia-bench-") as tmp,
    ):
        print(f"generating {args.rows:,} rows ...", flush=True)
        data.create_orders(conn, args.rows)
        workdir = Path(tmp)
        if not args.only_end_to_end:
            # Its workers (and ours' Spark session) are closed before the end-to-end phase.
            everything["results"] = in_process(conn, args, engines, workdir, pg_url, jdbc)
            save("in process")
        if not args.no_end_to_end and not args.only_a50 and "ours" in engines:
            everything["end_to_end"] = run_end_to_end(
                conn, args.rows, args.e2e_repeats, pg_url, jdbc, workdir / "end_to_end", engines
            )
            save("end to end")


def in_process(
    conn: psycopg.Connection,
    args: argparse.Namespace,
    engines: list[str],
    workdir: Path,
    pg_url: str,
    jdbc: dict[str, str],
) -> list[dict[str, Any]]:
    """S1-S4 and A50: every engine in a worker process of its own, timed from the engine's side
    (the object-store engine's lake in a bucket of moto's S3 server, which runs in this process)."""
    with ExitStack() as stack:
        server = postmaster_pid(conn)
        s3 = stack.enter_context(s3_lake(workdir / "s3")) if S3_ENGINE in engines else None
        workers = {}
        for name in engines:
            settings, requests = None, None
            if name == S3_ENGINE and s3 is not None:
                settings, requests = {"lake": s3.settings}, s3.requests
            worker = Worker(name, workdir, pg_url, server, jdbc, settings, requests)
            workers[name] = worker
            stack.callback(worker.close)
        return _scenarios(conn, args, engines, workers)


def _scenarios(
    conn: psycopg.Connection,
    args: argparse.Namespace,
    engines: list[str],
    workers: dict[str, Worker],
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    def record(scenario: str, name: str, outcome: dict[str, Any]) -> None:
        outcome.update(scenario=scenario, engine=name)
        results.append(outcome)
        maintenance = (
            f", maintenance: {outcome['maintenance']}" if outcome.get("maintenance") else ""
        )
        print(
            f"  {scenario} {name}: {outcome['wall']:.2f}s, {outcome['rows']} rows{maintenance}",
            flush=True,
        )

    def step(scenario: str, op: str, since: str, only: list[str] | None = None) -> None:
        for name in only or engines:
            record(scenario, name, workers[name].run(op, since))

    def read_amplification() -> None:
        run_read_amplification(conn, args.rows, args.a50_merges, args.repeats, workers, record)

    if args.only_a50:
        read_amplification()
        return results

    # The first load of each process pays for JIT compilation and cold caches: it is reported
    # apart, and the medians are of the runs after it.
    step("S1 first", "full", "")
    for _ in range(args.repeats):
        step("S1", "full", "")
    for name in ("dlt",):  # dlt's incremental pipeline needs its own first load
        if name in workers:
            workers[name].run("incremental", "")
    changes = {"S0": 0.0, "S2": 0.001, "S3": 0.10}
    # The object-store engine runs S1 and the merges only: S0, S2 and S3 append to a table the
    # local Iceberg engine shows already.
    incremental = [name for name in engines if name != S3_ENGINE]
    for scenario, fraction in changes.items():
        for _ in range(args.repeats):
            since = data.newest(conn)
            changed = round(args.rows * fraction)
            if changed:
                data.apply_changes(
                    conn,
                    args.rows,
                    inserted=changed // 2,
                    updated=changed - changed // 2,
                    recent=False,
                )
            step(scenario, "incremental", since, only=incremental)
    ours = [name for name in engines if name in OURS]
    for name in ours:
        workers[name].run("merge_setup", "")
    peers = [name for name in engines if name not in OURS]
    for scenario, recent in (("S4 clustered", True), ("S4 uniform", False)):
        for _ in range(args.repeats):
            since = data.newest(conn)
            data.apply_changes(
                conn, args.rows, inserted=0, updated=max(1, args.rows // 100), recent=recent
            )
            if ours:
                step(scenario, "merge", since, only=ours)
            if peers:
                step(scenario, "incremental", since, only=peers)
    if not args.no_a50:
        read_amplification()
    return results


def _fill_uncounted(results: list[dict[str, Any]]) -> None:
    """The COPY floor counts no rows; take the count of the run that read the same window."""
    counted = [r for r in results if r["rows"] is not None]
    for result in results:
        if result["rows"] is None:
            same = [r for r in counted if r["scenario"] == result["scenario"]]
            position = [
                r
                for r in results
                if r["scenario"] == result["scenario"] and r["engine"] == result["engine"]
            ].index(result)
            peers = [r for r in same if r["engine"] == "adbc"] or same
            result["rows"] = peers[min(position, len(peers) - 1)]["rows"] if peers else 0


def _machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    memory = (
        int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
        // 1024**2
    )
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory} GiB, {platform.platform()}, "
        f"Python {platform.python_version()}"
    )


if __name__ == "__main__":
    main()
