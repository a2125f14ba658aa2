"""What a run's commit to an Iceberg table will do, decided from the table's metadata without
Spark (`commit_plan.py`), and what its outcomes mean to the writer (`settled`). Plain values in,
plain values out: the executor that carries a plan out is exercised in test_iceberg_commits.py."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import types as T

from incremental_assets.errors import CommitUnknown, ConcurrentRunError, TableProblem
from incremental_assets.lake.facts import LakeHead
from incremental_assets.lake.iceberg.commit_plan import (
    Conflict,
    Landed,
    Unchanged,
    Unknown,
    column_changes,
    plan_commit,
    plan_replacement,
    settled,
)
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import (
    BATCH,
    REWRITE,
    RUN_ID,
    TXN,
    SnapshotInfo,
    TableState,
    state_from_json,
)

T0 = 1_767_225_600_000


def _snapshot(snapshot_id: int, parent: int | None, summary: dict[str, str]) -> dict[str, Any]:
    return {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent,
        "timestamp-ms": T0,
        "summary": {"operation": "append", **summary},
        "manifest-list": f"file:/lake/t/metadata/snap-{snapshot_id}.avro",
    }


def _state(
    properties: dict[str, str] | None = None,
    deletes: int = 0,
    version: int = 2,
    spec: str | None = "truncate[1000]",
) -> TableState:
    head = {TXN: "t1", BATCH: "1", RUN_ID: "run-1", "added-records": "10"}
    if deletes:
        head["total-delete-files"] = str(deletes)
    fields = [{"source-id": 1, "field-id": 1000, "name": "id_trunc", "transform": spec}]
    return state_from_json(
        {
            "format-version": version,
            "table-uuid": "uuid-1",
            "location": "file:/lake/t",
            "current-snapshot-id": 1,
            "snapshots": [_snapshot(1, None, head)],
            "properties": properties or {},
            "schemas": [
                {
                    "schema-id": 0,
                    "fields": [
                        {"id": 1, "name": "id", "type": "long", "required": False},
                        {"id": 2, "name": "name", "type": "string", "required": False},
                    ],
                }
            ],
            "current-schema-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": fields if spec else []}],
            "default-spec-id": 0,
        },
        "file:/lake/t/metadata/v1.metadata.json",
    )


MERGE = TableSettings.of("zstd", merge=True)
COPY = TableSettings.of("zstd", merge=True, writes="copy_on_write")
ROWS = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])


def _plan(state: TableState | None, settings: TableSettings = MERGE, **kwargs: Any) -> Any:
    return plan_commit(state, txn="t2", base=1, summary={TXN: "t2"}, settings=settings, **kwargs)


def test_a_first_commit_plans_only_its_branch() -> None:
    plan = _plan(None)

    assert plan.branch == "ia-t2"
    assert (plan.properties, plan.columns, plan.rewrite, plan.replacement) == ({}, (), None, None)
    assert not plan.apply_deletes and not plan.stale


def test_the_settings_a_table_lacks_are_set_and_the_rest_left_alone() -> None:
    held = dict(MERGE.properties) | {"write.parquet.compression-codec": "snappy"}

    plan = _plan(_state(held))

    assert plan.properties == {"write.parquet.compression-codec": "zstd"}
    assert plan.held_properties["write.parquet.compression-codec"] == "zstd"


def test_a_version_never_goes_down() -> None:
    plan = _plan(_state(dict(MERGE.properties), version=3))

    assert "format-version" not in plan.properties


def test_copy_on_write_applies_the_deletes_first_and_refuses_a_moved_table() -> None:
    held = dict(MERGE.properties)

    assert _plan(_state(held, deletes=2), COPY).apply_deletes
    assert not _plan(_state(held, deletes=0), COPY).apply_deletes
    assert not _plan(_state(held, deletes=2), MERGE).apply_deletes
    moved = plan_commit(_state(held, deletes=2), txn="t2", base=7, summary={}, settings=COPY)
    assert moved.stale


def test_new_columns_and_widened_types_change_in_place() -> None:
    lake = T.StructType(
        [T.StructField("id", T.IntegerType()), T.StructField("a b", T.StringType())]
    )
    run = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("a b", T.StringType()),
            T.StructField("`q`", T.DoubleType()),
        ]
    )

    plan = _plan(_state(), columns=(lake, run))

    assert plan.columns == ("ALTER COLUMN `id` TYPE bigint", "ADD COLUMN ```q``` double")
    assert plan.rewrite is None


def test_a_type_iceberg_cant_promote_rewrites_the_rows_in_the_tables_partitioning() -> None:
    lake = T.StructType([T.StructField("amount", T.DecimalType(10, 2))])
    run = T.StructType([T.StructField("amount", T.DecimalType(12, 4))])

    plan = _plan(_state(), columns=(lake, run))

    assert column_changes(lake, run) is None
    assert plan.columns == ()
    assert plan.rewrite is not None
    assert plan.rewrite.replacement.wanted == ("truncate(1000, `id`)",)
    # The rewrite changes no row: it carries the head's records, marked as a rewrite.
    assert plan.rewrite.summary == {TXN: "t1", BATCH: "1", RUN_ID: "run-1", REWRITE: "types"}


def test_a_table_whose_columns_stay_is_overwritten_on_the_branch_its_spec_evolved() -> None:
    settings = TableSettings.of("zstd", True, ("bucket(16, `id`)",))

    plan = plan_replacement(
        _state(dict(MERGE.properties)),
        txn="t2",
        base=1,
        summary={},
        settings=settings,
        rows=ROWS,
    )

    assert plan.replacement is not None and plan.replacement.in_place
    assert plan.replacement.partition == (
        "DROP PARTITION FIELD truncate(1000, `id`)",
        "ADD PARTITION FIELD bucket(16, `id`) AS `id_bucket_16`",
    )


def test_a_table_of_other_columns_is_recreated_without_giving_a_field_name_a_new_meaning() -> None:
    settings = TableSettings.of("zstd", True, ("truncate(500, `id`)",))
    rows = T.StructType([T.StructField("id", T.LongType())])

    plan = plan_replacement(_state(), txn="t2", base=1, summary={}, settings=settings, rows=rows)

    replacement = plan.replacement
    assert replacement is not None and not replacement.in_place and replacement.exists
    # `id_trunc` means truncate(1000) in this table: it is created so, then evolved.
    assert replacement.created.partitioning == ("truncate(1000, `id`)",)
    assert replacement.wanted == ("truncate(500, `id`)",)


def test_a_misplaced_table_is_forgotten_and_created() -> None:
    plan = plan_replacement(
        _state(), txn="t2", base=None, summary={}, settings=MERGE, rows=ROWS, misplaced=True
    )

    assert plan.replacement is not None
    assert plan.replacement.forget and not plan.replacement.exists


def test_outcomes_settle_into_a_landed_commit_nothing_or_the_error() -> None:
    snapshot = SnapshotInfo(5, 1, "append", {}, T0)
    head = LakeHead(table_id="u", txn="t2", batch=2, cursor=None, snapshot_id=5)
    landed = Landed(head, (snapshot,))
    refused = ConcurrentRunError(TableProblem("t", "moved"))

    assert settled(landed) is landed
    assert settled(Unchanged()) is None
    with pytest.raises(ConcurrentRunError):
        settled(Conflict(refused))
    with pytest.raises(CommitUnknown) as unknown:
        settled(Unknown(RuntimeError("CommitStateUnknownException")))
    assert isinstance(unknown.value.cause, RuntimeError)
