"""What an Iceberg table's metadata says of this package's commits, read without Spark: the head
(past maintenance, not past another writer), the records, the branches runs left, the rows a
snapshot reads as, and when snapshots are due to expire. Plain values in, plain values out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT
from incremental_assets.lake.iceberg.maintenance import (
    ORPHANS_SWEPT,
    Policy,
    compaction_due,
    due,
    expiring,
)
from incremental_assets.lake.iceberg.records import (
    BATCH,
    CURSOR,
    LAYOUT,
    RECORDS,
    RUN_ID,
    TXN,
    TableState,
    facts_of,
    head_of,
    landed,
    layout_of,
    live_rows,
    made_by,
    our_branches,
    record,
    state_from_json,
    summary_of,
)

T0 = 1_767_225_600_000  # 2026-01-01 UTC, in milliseconds


def _snapshot(
    snapshot_id: int,
    parent: int | None,
    operation: str,
    summary: dict[str, str] | None = None,
    at: int = T0,
) -> dict[str, Any]:
    return {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent,
        "timestamp-ms": at,
        "summary": {"operation": operation, **(summary or {})},
        "manifest-list": f"file:/lake/t/metadata/snap-{snapshot_id}.avro",
    }


def _ours(txn: str, batch: int, **extra: str) -> dict[str, str]:
    return {TXN: txn, BATCH: str(batch), CURSOR: f"c{batch}", **extra}


def _state(snapshots: list[dict[str, Any]], current: int | None, **metadata: Any) -> TableState:
    return state_from_json(
        {
            "table-uuid": "uuid-1",
            "location": "file:/lake/t",
            "current-snapshot-id": current if current is not None else -1,
            "snapshots": snapshots,
            "schemas": [
                {
                    "schema-id": 0,
                    "fields": [
                        {"id": 1, "name": "id", "type": "long", "required": False},
                        {"id": 2, "name": "_batch", "type": "long", "required": False},
                    ],
                }
            ],
            "current-schema-id": 0,
            "partition-specs": [
                {
                    "spec-id": 0,
                    "fields": [
                        {
                            "source-id": 1,
                            "field-id": 1000,
                            "name": "id_trunc",
                            "transform": "truncate[1000]",
                        }
                    ],
                }
            ],
            "default-spec-id": 0,
            **metadata,
        },
        "file:/lake/t/metadata/v1.metadata.json",
    )


def test_the_head_is_mains_newest_commit_of_ours_past_maintenance() -> None:
    state = _state(
        [
            _snapshot(1, None, "append", _ours("t1", 1)),
            _snapshot(2, 1, "overwrite", _ours("t2", 2)),
            _snapshot(3, 2, "replace"),  # compaction
            _snapshot(4, 3, "replace"),  # rewritten manifests
        ],
        current=4,
    )

    head = head_of(state)

    assert head is not None
    assert (head.txn, head.batch, head.cursor, head.snapshot_id) == ("t2", 2, "c2", 2)
    assert head.table_id == "uuid-1"


def test_another_writers_commit_is_the_head_as_it_is() -> None:
    """An append or a delete by another engine changed rows this package didn't write: the run
    must see a head that no materialization recorded, and refuse."""
    state = _state(
        [_snapshot(1, None, "append", _ours("t1", 1)), _snapshot(2, 1, "delete")], current=2
    )

    head = head_of(state)

    assert head is not None and (head.txn, head.batch, head.snapshot_id) == ("snapshot 2", -1, 2)
    assert layout_of(state) is None


def test_a_table_without_a_snapshot_has_no_head() -> None:
    assert head_of(_state([], current=None)) is None


def test_records_come_from_the_heads_summary_and_else_from_older_tables_properties() -> None:
    key = {"columns": ["id"], "weighed_by": {}}
    summary = summary_of(
        txn="t1", batch=1, cursor="c1", layout="merge", records={KEY: key}, run_id="run-1"
    )
    state = _state([_snapshot(1, None, "append", summary)], current=1)
    legacy = _state(
        [_snapshot(1, None, "append", _ours("t1", 1))],
        current=1,
        properties={RECORDS[KEY]: json.dumps(key), RECORDS[SNAPSHOT]: json.dumps({"batch": 1})},
    )

    assert record(state, KEY) == key
    assert summary[RUN_ID] == "run-1" and summary[LAYOUT] == "merge"
    assert layout_of(state) == "merge"
    assert record(legacy, KEY) == key and record(legacy, SNAPSHOT) == {"batch": 1}
    assert layout_of(legacy) == "merge"  # only merges kept a key record
    assert record(state, COLUMNS) is None


def test_facts_carry_the_records_the_layout_and_whether_the_table_holds_rows() -> None:
    summary = summary_of(
        txn="t1",
        batch=3,
        cursor="c3",
        layout="batches",
        records={SNAPSHOT: {"batch": 3, "txn": "t1"}, COLUMNS: {"since": {}, "absent": []}},
        run_id=None,
    )
    summary |= {"total-records": "10", "total-position-deletes": "10"}
    state = _state([_snapshot(1, None, "overwrite", summary)], current=1)

    facts = facts_of(state, "/lake/t")

    assert facts.replaced_batch == 3 and facts.columns == {"since": {}, "absent": []}
    assert facts.layout == "batches"
    assert facts.holds_rows is False  # every row deleted
    assert facts.head is not None and facts.head.batch == 3


@pytest.mark.parametrize(
    ("records", "deletes", "rows"), [("10", "0", 10), ("10", "3", 7), ("0", "0", 0)]
)
def test_a_snapshot_reads_as_its_records_less_its_deleted_positions(
    records: str, deletes: str, rows: int
) -> None:
    summary = {"total-records": records, "total-position-deletes": deletes}
    state = _state([_snapshot(1, None, "overwrite", summary)], current=1)

    assert state.current is not None and live_rows(state.current) == rows


def test_a_commit_has_landed_only_if_mains_history_holds_it() -> None:
    state = _state(
        [
            _snapshot(1, None, "append", _ours("t1", 1)),
            _snapshot(2, 1, "append", _ours("t2", 2)),
            _snapshot(3, 1, "append", _ours("t3", 2)),  # on a dropped branch, not main
        ],
        current=2,
    )

    assert landed(state, "t1") and landed(state, "t2")
    assert not landed(state, "t3")
    assert made_by(state, "t3") is None


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        pytest.param("ia-20260101T000000abcd0123", True, id="a run's"),
        pytest.param("ia-keep-me", False, id="another tool's"),
        pytest.param("ia-20260101T000000", False, id="no random part"),
        pytest.param("ia-20260101T000000abcd01234", False, id="one hex digit too many"),
        pytest.param("ia-20260101T000000ABCD0123", False, id="hex in capitals"),
        pytest.param("ia-20261301T000000abcd0123", False, id="no such month"),
        pytest.param("ia-20260101T000000abcd0123-x", False, id="a suffix"),
        pytest.param("audit", False, id="no prefix"),
    ],
)
def test_only_a_branch_named_by_a_commit_id_of_ours_is_a_runs(name: str, ours: bool) -> None:
    refs = {
        "main": {"snapshot-id": 1, "type": "branch"},
        name: {"snapshot-id": 1, "type": "branch"},
    }
    state = _state([_snapshot(1, None, "append", _ours("t1", 1))], current=1, refs=refs)

    assert our_branches(state) == ({name: name.removeprefix("ia-")} if ours else {})


def test_the_partition_spec_is_read_as_spark_sql_transforms() -> None:
    state = _state([], current=None)

    assert state.partitioning == ("truncate(1000, `id`)",)
    assert state.partition_fields == (("id_trunc", "truncate(1000, `id`)"),)


def test_every_earlier_spec_is_read_too_the_newest_first_after_the_default() -> None:
    def spec(spec_id: int, name: str, transform: str) -> dict[str, Any]:
        field = {"source-id": 1, "field-id": 1000, "name": name, "transform": transform}
        return {"spec-id": spec_id, "fields": [field]}

    specs = [
        spec(0, "id_trunc", "truncate[4]"),
        spec(1, "id_bucket", "bucket[8]"),
        spec(2, "id_trunc_6", "truncate[6]"),
    ]
    state = _state([], current=None, **{"partition-specs": specs, "default-spec-id": 1})

    assert state.partitioning == ("bucket(8, `id`)",)
    assert state.partition_fields == (
        ("id_bucket", "bucket(8, `id`)"),
        ("id_trunc_6", "truncate(6, `id`)"),
        ("id_trunc", "truncate(4, `id`)"),
    )


def _aged(count: int, newest: datetime) -> TableState:
    stamps = [int((newest - timedelta(minutes=count - i)).timestamp() * 1000) for i in range(count)]
    snapshots = [
        _snapshot(i + 1, i or None, "append", _ours(f"t{i}", i), at=at)
        for i, at in enumerate(stamps)
    ]
    return _state(snapshots, current=count)


@pytest.mark.parametrize(
    ("count", "keep", "keep_for", "due"),
    [
        (5, 10, timedelta(0), False),  # fewer than `keep`: whatever their age
        (15, 10, timedelta(days=1), False),  # beyond `keep`, but none a day old
        (15, 10, timedelta(minutes=5), True),  # beyond both
        (10, 10, timedelta(0), False),
    ],
)
def test_snapshots_expire_only_past_both_the_count_and_the_age(
    count: int, keep: int, keep_for: timedelta, due: bool
) -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    state = _aged(count, now)

    expired = expiring(state, keep, keep_for, now)

    assert bool(expired) is due
    older_than = int((now - keep_for).timestamp() * 1000)
    oldest_first = sorted(state.snapshots.values(), key=lambda s: s.timestamp_ms)
    assert (
        expired
        == [s.snapshot_id for s in oldest_first[: count - keep] if s.timestamp_ms < older_than][
            ::-1
        ]
    )


# -- maintenance: when each task is due ------------------------------------------------------------

POLICY = Policy(keep_snapshots=100, keep_snapshots_for=timedelta(days=1))


@pytest.mark.parametrize(
    ("totals", "compact"),
    [
        ({"total-records": "1000", "total-position-deletes": "50"}, False),
        ({"total-records": "1000", "total-position-deletes": "100"}, True),  # a tenth deleted
        ({"total-records": "1000", "total-delete-files": "32"}, True),  # many delete files
        ({"total-data-files": "64", "total-files-size": str(64 * (1 << 20))}, True),  # small
        ({"total-data-files": "64", "total-files-size": str(64 * (64 << 20))}, False),
        ({"total-data-files": "10", "total-files-size": "10"}, False),  # few, however small
    ],
)
def test_compaction_is_due_when_deletes_or_small_files_pile_up(
    totals: dict[str, str], compact: bool
) -> None:
    state = _state([_snapshot(1, None, "overwrite", {**_ours("t1", 1), **totals})], current=1)

    assert compaction_due(state, POLICY) is compact


NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _kept(first: int, ages: list[timedelta], swept: timedelta | None) -> TableState:
    """A table keeping snapshots `ages` old at NOW (oldest first), the first of them its commit
    number `first` (1: none has expired), its orphans last swept `swept` ago (None: never)."""
    snapshots = [
        {
            **_snapshot(first + i, first + i - 1 if i else None, "append", _ours(f"t{i}", i)),
            "timestamp-ms": int((NOW - age).timestamp() * 1000),
            "sequence-number": first + i,
        }
        for i, age in enumerate(ages)
    ]
    properties = {} if swept is None else {ORPHANS_SWEPT: (NOW - swept).isoformat()}
    current = first + len(ages) - 1 if ages else None
    return _state(snapshots, current=current, properties=properties, **{"format-version": 2})


HOURS, DAYS = timedelta(hours=1), timedelta(days=1)


@pytest.mark.parametrize(
    ("first", "ages", "swept", "sweep"),
    [
        pytest.param(1, [], None, False, id="no snapshot yet"),
        pytest.param(1, [0 * HOURS], None, False, id="a new table's first commit"),
        pytest.param(1, [5 * HOURS, 0 * HOURS], None, False, id="its first day"),
        pytest.param(1, [DAYS, 0 * HOURS], None, True, id="a day old, never swept"),
        pytest.param(1, [4 * DAYS, 0 * HOURS], None, True, id="days old, never swept"),
        # Committing faster than snapshots are kept: the oldest kept is young, the table is not.
        pytest.param(500, [2 * HOURS, 0 * HOURS], None, True, id="busy, never swept"),
        pytest.param(500, [2 * HOURS, 0 * HOURS], 25 * HOURS, True, id="busy, swept yesterday"),
        pytest.param(500, [2 * HOURS, 0 * HOURS], 23 * HOURS, True, id="a daily schedule, early"),
        pytest.param(500, [2 * HOURS, 0 * HOURS], 2 * HOURS, False, id="busy, swept today"),
        pytest.param(1, [4 * DAYS, 0 * HOURS], 2 * HOURS, False, id="swept today"),
    ],
)
def test_orphans_are_swept_once_a_day_on_any_table_past_its_first_day(
    first: int, ages: list[timedelta], swept: timedelta | None, sweep: bool
) -> None:
    state = _kept(first, ages, swept)

    assert ("orphans" in due(state, POLICY, NOW)) is sweep


def test_an_expiry_keeps_every_snapshot_down_to_the_head_whatever_keep_snapshots_says() -> None:
    """Compactions after the last commit of ours are `replace` snapshots without its summary:
    expired past it, the head (and its records) would be gone, and every run refused."""
    now = datetime(2026, 1, 10, tzinfo=UTC)
    at = [int((now - timedelta(days=5 - i)).timestamp() * 1000) for i in range(4)]
    state = _state(
        [
            _snapshot(1, None, "append", _ours("t1", 1), at=at[0]),
            _snapshot(2, 1, "overwrite", _ours("t2", 2), at=at[1]),
            _snapshot(3, 2, "replace", at=at[2]),
            _snapshot(4, 3, "replace", at=at[3]),
        ],
        current=4,
    )

    assert expiring(state, keep=1, keep_for=timedelta(0), now=now) == [1]


def test_an_expiry_counts_the_history_a_full_refresh_replaced_and_no_abandoned_branch() -> None:
    """A full refresh's `CREATE OR REPLACE` gives its snapshot no parent: the snapshots before
    it are no longer main's ancestors, but main was at them (the snapshot log keeps them), so
    they count as newer ones for `keep_snapshots`. A dead run's branch snapshot was never
    main's: it doesn't."""
    now = datetime(2026, 1, 10, tzinfo=UTC)
    at = [int((now - timedelta(days=5 - i)).timestamp() * 1000) for i in range(4)]
    state = _state(
        [
            _snapshot(1, None, "append", _ours("t1", 1), at=at[0]),
            _snapshot(2, 1, "append", _ours("t2", 2), at=at[1]),
            _snapshot(9, 2, "append", _ours("t9", 9), at=at[2]),  # a dead run's, on no ref
            _snapshot(3, None, "overwrite", _ours("t3", 3), at=at[3]),
        ],
        current=3,
        **{"snapshot-log": [{"snapshot-id": i, "timestamp-ms": 0} for i in (1, 2, 3)]},
    )

    assert expiring(state, keep=2, keep_for=timedelta(0), now=now) == [1]
    assert expiring(state, keep=1, keep_for=timedelta(0), now=now) == [9, 2, 1]
    assert expiring(state, keep=3, keep_for=timedelta(0), now=now) == []
    assert expiring(state, keep=1, keep_for=timedelta(days=4, hours=12), now=now) == [1]


def test_an_expiry_keeps_main_down_to_the_head_by_ancestry_not_by_clock() -> None:
    """A compaction from a host whose clock is behind lands after the head with an earlier
    timestamp: it is still main's, above the head, so it stays (and so does the head)."""
    now = datetime(2026, 1, 10, tzinfo=UTC)
    day = [int((now - timedelta(days=5 - i)).timestamp() * 1000) for i in range(4)]
    state = _state(
        [
            _snapshot(1, None, "append", _ours("t1", 1), at=day[0]),
            _snapshot(2, 1, "append", _ours("t2", 2), at=day[2]),
            _snapshot(3, 2, "replace", at=day[1]),  # written with a slow clock
            _snapshot(4, 3, "replace", at=day[3]),
        ],
        current=4,
    )

    assert expiring(state, keep=1, keep_for=timedelta(0), now=now) == [1]
