"""The embedded demo: a landing folder of Parquet files exported by an example shop.

    python -m incremental_assets.demo seed   LANDING   # first export
    python -m incremental_assets.demo change LANDING   # new orders, updates, soft deletes
    python -m incremental_assets.demo report           # what each run did, from the instance
    python -m incremental_assets.demo run LOG TABLE... # `incremental-assets run`, its output in
                                                       # LOG, its progress lines shown

No server is needed: the files source reads the landing folder, and the cursors live in the
Dagster instance named by DAGSTER_HOME.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets.config import Project
from incremental_assets.progress import INTERVAL_ENV
from incremental_assets.progress_lines import MARK

_T0 = datetime(2025, 1, 1, tzinfo=UTC)
_STATUSES = ["placed", "paid", "shipped", "delivered"]
_ORDERS = pa.schema(
    [
        ("id", pa.int64()),
        ("customer_id", pa.int64()),
        ("amount", pa.decimal128(12, 2)),
        ("status", pa.string()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("deleted_at", pa.timestamp("us", tz="UTC")),
    ]
)
_EVENTS = pa.schema(
    [
        ("event_id", pa.int64()),
        ("order_id", pa.int64()),
        ("kind", pa.string()),
        ("happened_at", pa.timestamp("us", tz="UTC")),
    ]
)
_CUSTOMERS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("country", pa.string())])


def _order(
    rng: random.Random, order_id: int, at: datetime, deleted: bool = False
) -> dict[str, object]:
    return {
        "id": order_id,
        "customer_id": rng.randint(1, 200),
        "amount": Decimal(rng.randint(100, 99_999)) / 100,
        "status": rng.choice(_STATUSES),
        "updated_at": at,
        "deleted_at": at if deleted else None,
    }


def _write(folder: Path, name: str, rows: list[dict[str, object]], schema: pa.Schema) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / name)


def seed(landing: Path) -> None:
    """The first export: 1,000 orders, their events, 200 customers."""
    shutil.rmtree(landing, ignore_errors=True)
    rng = random.Random(7)
    orders = [_order(rng, i, _T0 + timedelta(minutes=i, microseconds=i)) for i in range(1, 1001)]
    _write(landing / "orders", "export-0001.parquet", orders, _ORDERS)
    events = [
        {"event_id": i, "order_id": i, "kind": "placed", "happened_at": _T0 + timedelta(minutes=i)}
        for i in range(1, 1001)
    ]
    _write(landing / "order_events", "export-0001.parquet", events, _EVENTS)
    customers = [
        {"id": i, "name": f"Customer {i}", "country": rng.choice(["FR", "DE", "US"])}
        for i in range(1, 201)
    ]
    _write(landing / "customers", "snapshot.parquet", customers, _CUSTOMERS)
    print(f"seeded {landing}: 1000 orders, 1000 order events, 200 customers")


def change(landing: Path) -> None:
    """A later export: 50 new orders, 100 updated, 10 soft-deleted; new events; 10 new customers."""
    rng = random.Random(8)
    later = _T0 + timedelta(days=2)
    new = [_order(rng, i, later + timedelta(seconds=i)) for i in range(1001, 1051)]
    updated = [
        _order(rng, i, later + timedelta(seconds=i)) for i in rng.sample(range(1, 1001), 100)
    ]
    deleted = [
        _order(rng, i, later + timedelta(hours=1, seconds=i), deleted=True) for i in range(1, 11)
    ]
    _write(landing / "orders", "export-0002.parquet", new + updated + deleted, _ORDERS)
    events = [
        {
            "event_id": 1000 + n,
            "order_id": row["id"],
            "kind": "changed",
            "happened_at": row["updated_at"],
        }
        for n, row in enumerate(new + updated + deleted, start=1)
    ]
    _write(landing / "order_events", "export-0002.parquet", events, _EVENTS)
    customers = [
        {"id": i, "name": f"Customer {i}", "country": rng.choice(["FR", "DE", "US"])}
        for i in range(1, 211)
    ]
    _write(landing / "customers", "snapshot.parquet", customers, _CUSTOMERS)
    print(
        f"changed {landing}: 50 new orders, 100 updated, 10 deleted; 160 new events; "
        "10 new customers"
    )


def report() -> None:
    """Per table and run: rows extracted and written, and the cursor before and after."""
    import dagster as dg

    from incremental_assets.config import load_project
    from incremental_assets.state import record_of
    from incremental_assets.translator import translator_for

    project = load_project()
    translator = translator_for(project)
    with dg.DagsterInstance.get() as instance:
        print(
            f"{'table':<14}{'run':>4} {'extracted':>10}{'written':>9}{'in lake':>9}  "
            "cursor before -> after"
        )
        for table in project.tables:
            key = translator.asset_key(table)
            records = instance.fetch_materializations(key, limit=100).records
            for number, record in enumerate(reversed(records), start=1):
                m = record_of(record)
                print(
                    f"{table.name:<14}{number:>4} {m.rows_extracted:>10}{m.rows_written:>9}"
                    f"{m.row_count:>9}  {m.previous_cursor} -> {m.cursor}"
                )
        orders = project.table("orders")
        if translator.lake_format(orders) == "iceberg":
            history = instance.fetch_materializations(translator.asset_key(orders), limit=100)
            snapshots = [record_of(r).iceberg_snapshot_id for r in reversed(history.records)]
            _read_back(project, translator.lake_table_name(orders), snapshots)


def _read_back(project: Project, identifier: str, snapshots: list[int | None]) -> None:
    """The table as of each materialization's snapshot, read as any user would: through
    PyIceberg, and with Spark SQL by the catalog (`VERSION AS OF`)."""
    from incremental_assets.lake.iceberg import IcebergLake
    from incremental_assets.lake.iceberg.metadata import pyiceberg_catalog
    from incremental_assets.resources import IncrementalSparkResource, spark_log_path

    lake = IcebergLake(project.lake, "orders", identifier)
    table = pyiceberg_catalog(lake.catalog).load_table(identifier)
    resource = IncrementalSparkResource.from_spec(project.spark)
    # The JVM's own start-up notice (Spark's incubator modules) goes beside Spark's log.
    with _stderr_to(spark_log_path().with_name("demo-jvm.log")):
        spark = lake.session(resource.spark_session)
    print(f"\n{identifier}, read back as of each materialization (PyIceberg, Spark SQL):")
    try:
        for number, snapshot in enumerate(snapshots, start=1):
            rows = table.scan(snapshot_id=snapshot).to_arrow().num_rows
            sql = f"SELECT count(*) FROM {lake.reference()} VERSION AS OF {snapshot}"
            counted = spark.sql(sql).first()
            print(
                f"  run {number} (snapshot {snapshot}): {rows} rows; Spark SQL: "
                f"{counted[0] if counted else '?'} rows ({sql})"
            )
    finally:
        resource.stop()


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """The process's standard error, which a JVM started meanwhile keeps, written to `path`."""
    sys.stderr.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    try:
        with path.open("a") as kept:
            os.dup2(kept.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run(log: Path, tables: list[str]) -> int:
    """`incremental-assets run TABLES`, everything it prints kept in `log`, its progress lines
    shown as they come (a first load is a minute of Spark's start and work), and its last lines
    if it fails."""
    command = [str(Path(sys.executable).with_name("incremental-assets")), "run", *tables]
    # A line a minute is silence for a demo: every 5 seconds unless asked otherwise.
    env = {INTERVAL_ENV: "5", **os.environ}
    with (
        log.open("w") as kept,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        ) as process,
    ):
        assert process.stdout is not None
        for line in process.stdout:
            kept.write(line)
            if shown(line):
                print(f"  {line.rstrip()}", flush=True)
    if process.returncode:
        print("".join(log.read_text().splitlines(keepends=True)[-40:]), end="")
    return process.returncode


def shown(line: str) -> bool:
    """Whether a line of the run's output is a progress line."""
    return f": {MARK} " in line


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m incremental_assets.demo", description=__doc__)
    parser.add_argument("command", choices=["seed", "change", "report", "run"])
    parser.add_argument("landing", nargs="?", type=Path, default=Path(".demo/landing"))
    parser.add_argument("tables", nargs="*")
    args = parser.parse_args()
    if args.command == "seed":
        seed(args.landing)
    elif args.command == "change":
        change(args.landing)
    elif args.command == "run":
        sys.exit(run(args.landing, args.tables))
    else:
        report()


if __name__ == "__main__":
    main()
