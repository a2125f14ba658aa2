"""Converting a table's plain Parquet lake to Iceberg in place: the same files, the same cursor.

    the stored state + the plain table it describes -> an Iceberg table whose first snapshot
    holds those files where they are, with the last commit's batch and cursor

No row is read or written: the data files become the snapshot's as they are, so the table reads
the same through PyIceberg as it did as a folder, and the next run adds to it from the stored
cursor. The plain format's own records (`_head`, `_snapshot`, `_columns`, `_key`) become table
properties and are removed from the folder. The caller holds the table's lock and records the
new lake table with the cursor (`cli/lake.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from incremental_assets.config import LakeSpec, TableSpec
from incremental_assets.decisions import check_lake_matches
from incremental_assets.errors import ConfigError, TableProblem, WriteError
from incremental_assets.lake import Commit, LakeHead
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT
from incremental_assets.lake.iceberg import CONVERTED, IcebergLake
from incremental_assets.lake.names import new_txn
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import StoredState


@dataclass(frozen=True, kw_only=True)
class Converted:
    head: LakeHead
    files: int
    rows: int


def convert_to_iceberg(
    table: TableSpec, lake: LakeSpec, identifier: str, stored: StoredState
) -> Converted:
    """The plain Parquet table the stored cursor describes, made an Iceberg table in place."""
    if lake.format == "parquet":
        raise ConfigError(
            TableProblem(
                table.name,
                "the lake's format is parquet, so there is no Iceberg table to convert to.",
                "lake.format",
                "set lake.format: iceberg in the configuration (or remove it), then convert.",
            )
        )
    if stored.batch == 0:
        raise WriteError(
            TableProblem(
                table.name,
                "no run of the table is recorded, so there is nothing to keep: its first run "
                "loads the whole table into Iceberg.",
                fix=f"run it: `incremental-assets run {table.name}`.",
            )
        )
    source = ParquetLake(lake.table_uri(table.name), table.name)
    target = IcebergLake(lake, table.name, identifier)
    resumed = target.converted_from(stored.lake_table_id)
    if resumed is not None:  # converted already, but not recorded: record it now
        source.drop_records()
        files = len(target.facts().files)
        return Converted(head=resumed, files=files, rows=target.count_rows())
    source.recover()
    facts = source.facts()
    if not facts.files:
        raise WriteError(
            TableProblem(
                table.name,
                f"{source.uri} holds no plain Parquet data files to convert.",
                fix=f"rebuild the table with `incremental-assets run {table.name} --full`.",
            )
        )
    check_lake_matches(table, stored, facts)
    records = {name: value for name, value in ((KEY, facts.key), (COLUMNS, facts.columns)) if value}
    txn = new_txn()
    records[CONVERTED] = {"from": stored.lake_table_id, "txn": txn}
    if facts.replaced_batch is not None:
        records[SNAPSHOT] = {"batch": facts.replaced_batch, "txn": "converted"}
    commit = Commit(
        txn=txn,
        batch=facts.head.batch if facts.head is not None else stored.batch,
        replace_all=False,
        cursor=stored.cursor,
        adds=[],
        removes=[],
        records=records,
    )
    head = target.adopt(commit, list(facts.files))
    source.drop_records()
    return Converted(head=head, files=len(facts.files), rows=target.count_rows())
