"""Converting a table's plain Parquet lake to Iceberg in place: the same rows, the same cursor.

    the stored state + the plain table it describes -> an Iceberg table at the same place,
    created with its rows in one snapshot that carries the last commit's batch and cursor

Spark reads the plain table's files and creates the Iceberg table from them in one catalog
commit (`CREATE TABLE ... AS SELECT`): the table never exists without its rows, and a
conversion cut short either made it whole or made nothing. The plain format's records become
the snapshot's (`_key`, `_columns`, `_snapshot`), with the plain table's identity (`converted-
from`), and its files and records are then removed from the folder. Run again after it was cut
short, it finishes: a conversion that committed is recognised by that identity. The caller holds
the table's lock and records the new lake table with the cursor (`cli/lake.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incremental_assets.config import LakeSpec, TableSpec
from incremental_assets.decisions import check_lake_matches
from incremental_assets.errors import ConfigError, TableProblem, WriteError
from incremental_assets.lake import LakeFacts, LakeHead
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.branch import Whole
from incremental_assets.lake.iceberg.commit_plan import plan_replacement, settled
from incremental_assets.lake.iceberg.commits import apply
from incremental_assets.lake.iceberg.partitions import bucketable, partition_spec
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import CONVERTED, head_snapshot, summary_of
from incremental_assets.lake.names import new_txn
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.pause_points import pause_point
from incremental_assets.results import StoredState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, kw_only=True)
class Converted:
    head: LakeHead
    files: int
    rows: int


def convert_to_iceberg(
    spark: SparkSession, table: TableSpec, lake: LakeSpec, identifier: str, stored: StoredState
) -> Converted:
    """The plain Parquet table the stored cursor describes, made an Iceberg table in place."""
    _check_convertible(table, lake, stored)
    source = ParquetLake(lake.table_uri(table.name), table.name)
    target = IcebergLake(lake, table.name, identifier)
    resumed = _converted_from(target, stored.lake_table_id)
    if resumed is not None:  # converted already, but not recorded: finish and record it now
        removed = _remove_plain(source)
        return Converted(head=resumed, files=removed, rows=target.count_rows())
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
    txn = new_txn()
    frame = target.session(spark).read.parquet(*source.file_uris(list(facts.files)))
    merge = facts.layout == "merge"
    partitioning = iceberg_partitioning(facts, source.count_rows(), table.buckets)
    settings = TableSettings.of(lake.codec, merge, partitioning, table.merge_writes)
    held = target.facts()
    plan = plan_replacement(
        target.state(),
        txn=txn,
        base=held.current_snapshot,
        summary=_summary(facts, stored, txn),
        settings=settings,
        rows=frame.schema,
        misplaced=held.misplaced is not None,
    )
    landed = settled(apply(target, spark, plan, Whole(frame)))
    assert landed is not None, "a replacement always makes a snapshot"
    head = landed.head
    pause_point("committed")
    _remove_plain(source)
    return Converted(head=head, files=len(facts.files), rows=target.count_rows())


def _check_convertible(table: TableSpec, lake: LakeSpec, stored: StoredState) -> None:
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


def _summary(facts: LakeFacts, stored: StoredState, txn: str) -> dict[str, str]:
    records: dict[str, object] = {KEY: facts.key, COLUMNS: facts.columns}
    if facts.replaced_batch is not None:
        records[SNAPSHOT] = {"batch": facts.replaced_batch, "txn": "converted"}
    records[CONVERTED] = {"from": stored.lake_table_id, "txn": txn}
    return summary_of(
        txn=txn,
        batch=facts.head.batch if facts.head is not None else stored.batch,
        cursor=stored.cursor,
        layout=facts.layout or "batches",
        records=records,
        run_id=None,
    )


def iceberg_partitioning(facts: LakeFacts, rows: int, buckets: int | None) -> tuple[str, ...]:
    """A merge table's partitions, as a first load of its rows would choose them
    (`partitions.py`): ranges where its buckets are key ranges, else hash buckets."""
    key = facts.key_columns
    held = [f.bucket for f in facts.files if f.bucket is not None]
    if not key or not held:
        return ()
    scheme = held[0][0]
    indexes = [index for _, index in held]
    key_range = None
    if scheme.kind == "range":
        key_range = (min(indexes) * scheme.size, (max(indexes) + 1) * scheme.size - 1)
    hashable = facts.schema is not None and bucketable(facts.schema[key[0]].dataType)
    return partition_spec(key[0], rows, key_range, bucketable=hashable, buckets=buckets)


def _converted_from(target: IcebergLake, plain_id: str | None) -> LakeHead | None:
    """The Iceberg table's head, if a conversion of the plain table `plain_id` made it."""
    state = target.state()
    snapshot = head_snapshot(state) if state is not None else None
    if state is None or snapshot is None or plain_id is None:
        return None
    made = json.loads(snapshot.summary.get(CONVERTED, "{}"))
    if made.get("from") != plain_id:
        return None
    return target.facts().head


def _remove_plain(source: ParquetLake) -> int:
    """Remove the plain table's data files and records from the folder; how many files."""
    files = source.folder.list_data_files()
    for file in files:
        source.folder.fs.delete_file(source.folder.join(file.name))
    source.drop_records()
    return len(files)
