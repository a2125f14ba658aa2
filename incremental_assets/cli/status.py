"""`validate` and `status`: the configuration (and with `--connect`, each table against its
source), and per table the cursor and the last run."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from incremental_assets.cli.context import asset_key, open_instance, project_and_tables
from incremental_assets.config import LakeSpec, Project, TableSpec, load_config
from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.catalog import catalog_of
from incremental_assets.state import read_state_records, record_of
from incremental_assets.translator import translator_for
from incremental_assets.validation import check_sources


def validate(args: argparse.Namespace) -> int:
    """The valid tables listed (and with `--connect` checked against their sources), then the
    invalid ones' problems: status 1 if there are any."""
    loaded = load_config(args.config)
    project = loaded.project
    translator_for(project)  # a translator the configuration names must import
    if loaded.invalid_tables:
        total = len(project.tables) + len(loaded.invalid_tables)
        print(f"{project.path}: {len(project.tables)} of {total} tables valid")
    else:
        print(f"{project.path}: valid, {len(project.tables)} tables")
    for table in project.tables:
        cursor = table.cursor.column if table.cursor else "no cursor (full refresh every run)"
        if table.capture == "log":
            cursor = "the log's position (capture: log)"
        print(
            f"  {table.name}: {table.mode.value} from source '{table.source.name}', cursor {cursor}"
        )
    failed = _checked_against_sources(project) if args.connect else []
    loaded.whole()  # raises ConfigError with every invalid table's problems
    return 1 if failed else 0


def _checked_against_sources(project: Project) -> list[str]:
    """Each table's check against its source printed; the tables that failed."""
    print("against the sources, without Spark:")
    checks = check_sources(project)
    for check in checks:
        print(f"  {check.line()}")
    failed = [check.table for check in checks if check.problems]
    if failed:
        print(
            f"incremental-assets: {len(failed)} of {len(checks)} tables can't be loaded as "
            f"configured: {', '.join(failed)}",
            file=sys.stderr,
        )
    return failed


def table_status(
    instance: dg.DagsterInstance, project: Project, table: TableSpec
) -> dict[str, Any]:
    """The cursor the next run starts from, the last materialization, and a pending override."""
    records = read_state_records(instance, asset_key(project, table))
    run, last = records.materialization, record_of(records.materialization)
    return {
        "table": table.name,
        "asset_key": "/".join(asset_key(project, table).path),
        "mode": table.mode.value,
        "cursor_column": table.cursor.column if table.cursor else None,
        "cursor": records.stored_state().cursor,
        "last_run_id": run.run_id if run else None,
        "last_run_at": _when(run),
        "last_run_cursor": last.cursor,
        "rows_in_lake": last.row_count,
        "rows_extracted": last.rows_extracted,
        "rows_written": last.rows_written,
        "cursor_override": _override(records.override),
        "lake_uri": project.lake.table_uri(table.name),
        "lake_table": last.table_name,
        "iceberg_snapshot_id": last.iceberg_snapshot_id,
        "iceberg_metadata_location": last.iceberg_metadata_location,
        "checks_not_run": (last.checks_not_run or "").splitlines(),
    }


def _when(record: dg.EventLogRecord | None) -> str | None:
    return datetime.fromtimestamp(record.timestamp, UTC).isoformat() if record else None


def _override(record: dg.EventLogRecord | None) -> dict[str, Any] | None:
    """A `cursor set|reset` recorded after the last materialization: the next run honours it."""
    if record is None:
        return None
    override = record_of(record)
    return {
        "action": override.cursor_action,
        "cursor": override.cursor,
        "previous_cursor": override.previous_cursor,
        "note": override.note,
        "at": _when(record),
    }


def show_status(args: argparse.Namespace) -> int:
    project, tables = project_and_tables(args, args.tables)
    with open_instance() as instance:
        if args.history:
            return _show_history(instance, project, tables, args.json)
        rows = [table_status(instance, project, table) for table in tables]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'table':<16}{'mode':<13}{'rows':>9}  {'last run':<21}cursor")
    for row in rows:
        rows_in_lake = "-" if row["rows_in_lake"] is None else row["rows_in_lake"]
        when = (row["last_run_at"] or "never")[:19].replace("T", " ")
        print(f"{row['table']:<16}{row['mode']:<13}{rows_in_lake:>9}  {when:<21}{row['cursor']}")
        override = row["cursor_override"]
        if override:
            start = (
                f"reads from {override['cursor']}" if override["cursor"] else "extracts everything"
            )
            print(
                f"{'':<16}cursor {override['action']} at {override['at'][:19].replace('T', ' ')}: "
                f"the next run {start} (was {override['previous_cursor']}); {override['note']}"
            )
        if row["iceberg_snapshot_id"] is not None:
            print(
                f"{'':<16}Iceberg table {row['lake_table']} at snapshot "
                f"{row['iceberg_snapshot_id']}; every run's: incremental-assets status --history "
                f"{row['table']}"
            )
        if row["iceberg_metadata_location"]:
            print(
                f"{'':<16}metadata file (DuckDB's iceberg_scan): {row['iceberg_metadata_location']}"
            )
    return 0


# What each record of the history is: a run's materialization, or what `cursor set|reset` and
# `lake convert` recorded.
_EVENTS = {None: "run", "set": "cursor set", "reset": "cursor reset", "convert": "lake convert"}


def _show_history(
    instance: dg.DagsterInstance, project: Project, tables: list[TableSpec], as_json: bool
) -> int:
    """Each materialization and each `cursor set|reset`, newest first: when, what, the cursor,
    the rows, and the lake's snapshot, which any Iceberg reader can read the table as of while it
    is kept (an expired one is marked so, not offered)."""
    found: list[tuple[int, dict[str, Any]]] = []
    for table in tables:
        key = asset_key(project, table)
        records = instance.fetch_materializations(key, limit=1000).records
        overrides = [
            r
            for r in instance.fetch_observations(key, limit=1000).records
            if record_of(r).cursor_action is not None
        ]
        kept = _kept_snapshots(project, table) if records else None
        for record in [*records, *overrides]:
            metadata = record_of(record)
            snapshot = metadata.iceberg_snapshot_id
            found.append(
                (
                    record.storage_id,
                    {
                        "table": table.name,
                        "event": _EVENTS[metadata.cursor_action],
                        "run_id": record.run_id or None,
                        "at": _when(record),
                        "cursor": metadata.cursor,
                        "rows_in_lake": metadata.row_count,
                        "lake_table": metadata.table_name,
                        "iceberg_snapshot_id": snapshot,
                        "snapshot_expired": (
                            None if snapshot is None or kept is None else snapshot not in kept
                        ),
                    },
                )
            )
    rows = [row for _, row in sorted(found, key=lambda pair: -pair[0])]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'table':<16}{'at':<21}{'event':<14}{'rows':>9}  {'snapshot':<29}cursor")
    for row in rows:
        when = str(row["at"])[:19].replace("T", " ")
        shown = str(row["iceberg_snapshot_id"] if row["iceberg_snapshot_id"] is not None else "-")
        if row["snapshot_expired"]:
            shown += " (expired)"
        rows_in_lake = "-" if row["rows_in_lake"] is None else row["rows_in_lake"]
        event = str(row["event"])
        print(
            f"{row['table']:<16}{when:<21}{event:<14}{rows_in_lake:>9}  {shown:<29}{row['cursor']}"
        )
    readable = next(
        (
            r
            for r in rows
            if r["iceberg_snapshot_id"] is not None
            and r["lake_table"] is not None
            and not r["snapshot_expired"]
        ),
        None,
    )
    if readable is not None:
        lake_table, as_of = str(readable["lake_table"]), str(readable["iceberg_snapshot_id"])
        print(pyiceberg_reader(project.lake, lake_table, as_of))
    return 0


def pyiceberg_reader(lake: LakeSpec, lake_table: str, snapshot: str) -> str:
    """Python that reads `lake_table` as of `snapshot`, its catalog opened as the package opens
    it (its secrets shown as ***, for the reader to put in)."""
    catalog = catalog_of(lake)
    properties = catalog.redact(repr(catalog.pyiceberg))
    secret = "  # *** stands for the catalog's secret\n" if "***" in properties else ""
    return (
        "\nas of a snapshot, in PyIceberg (docs/lake-format.md):\n"
        "  from pyiceberg.catalog import load_catalog\n"
        f"  catalog = load_catalog({catalog.name!r}, **{properties})\n{secret}"
        f"  catalog.load_table({lake_table!r}).scan(snapshot_id={snapshot}).to_arrow()"
    )


def _kept_snapshots(project: Project, table: TableSpec) -> set[int] | None:
    """The snapshots an Iceberg table still keeps (None: not an Iceberg table, or not readable)."""
    lake = open_lake(project.lake, table.name, translator_for(project).lake_table_name(table))
    if not isinstance(lake, IcebergLake):
        return None
    try:
        state = lake.state()
    except IncrementalAssetsError:
        return None
    return set(state.snapshots) if state is not None else None
