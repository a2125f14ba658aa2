"""What kind of run a load is, decided from the request, the lake's facts and the source's facts
alone: no Spark job, no database, no lake on disk."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec, TableSpec, project_from_mapping
from incremental_assets.cursor import CursorType
from incremental_assets.decisions import (
    Asked,
    SourceFacts,
    changed_delete_column,
    check_lake_fits,
    check_still_last,
    key_enforced,
    kind_of_run,
)
from incremental_assets.errors import ConcurrentRunError, ConfigError, WriteError
from incremental_assets.lake.facts import LakeFacts, LakeHead, files_digest
from incremental_assets.lake.names import DataFile, data_file, data_file_name
from incremental_assets.lake.parquet import layout_of
from incremental_assets.results import StoredState
from incremental_assets.settings import changed_settings, settings_digest, settings_text

SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("note", T.StringType())])
TABLE_ID, TXN, NEXT_TXN = "t" * 32, "20250101T000000aaaaaaaa", "20250102T000000bbbbbbbb"


def table_spec(**settings: Any) -> TableSpec:
    entry = {
        "name": "orders",
        "source": "shop",
        "table": "public.orders",
        "cursor": "updated_at",
        "mode": "merge",
        "primary_key": ["id"],
        **settings,
    }
    raw = {
        "lake": {"path": "/lake", "format": "parquet"},
        "sources": {"shop": {"type": "jdbc", "url": "jdbc:postgresql://db/shop", "user": "u"}},
        "tables": [{k: v for k, v in entry.items() if v is not None}],
    }
    return project_from_mapping(raw, Path("/project/incremental_assets.yaml")).tables[0]


def request(table: TableSpec, *, full_refresh: bool = False, backfill: bool = False) -> Asked:
    text = settings_text(table, LakeSpec(path="/lake", format="parquet"), "parquet")
    return Asked(full_refresh=full_refresh, backfill=backfill, settings=text)


def files(group: str, count: int = 2, txn: str = TXN) -> tuple[DataFile, ...]:
    found = (data_file(data_file_name(group, txn, i), 100) for i in range(count))
    return tuple(f for f in found if f is not None)


BUCKETS = files("h00001of00016") + files("h00007of00016")
BATCHES = files("b000000000001")


def stored(table: TableSpec | None = None, **changes: Any) -> StoredState:
    """The state a run recorded after committing TXN as batch 1, under `table`'s settings."""
    settings = None if table is None else request(table).settings
    state = StoredState(
        cursor="2025-01-01T00:00:00+00:00",
        cursor_column="updated_at",
        cursor_type=CursorType.TIMESTAMPTZ,
        batch=1,
        run_id="run-1",
        row_count=40,
        lake_table_id=TABLE_ID,
        lake_commit=TXN,
        settings=settings,
    )
    return replace(state, **changes)


def lake(held: tuple[DataFile, ...] = BUCKETS, **changes: Any) -> LakeFacts:
    """The lake as that run left it: its identity, its commit, exactly its files."""
    head = LakeHead(table_id=TABLE_ID, txn=TXN, batch=1, files=files_digest(f.name for f in held))
    facts = LakeFacts(
        uri="/lake/orders",
        files=held,
        schema=SCHEMA,
        head=head,
        layout=layout_of(list(held)),
        holds_rows=bool(held),
    )
    return replace(facts, **changes)


# -- the kind of run ------------------------------------------------------------------------


def test_a_plain_run_over_the_lake_its_cursor_describes_is_incremental() -> None:
    table = table_spec()
    kind = kind_of_run(table, request(table), stored(table), lake(), None)
    assert not kind.replace_all and kind.warnings == ()


def test_a_full_refresh_the_lake_holds_but_the_state_doesnt_know_is_repeated() -> None:
    table = table_spec()
    kind = kind_of_run(table, request(table), stored(table), lake(replaced_batch=2), None)
    assert kind.replace_all
    assert "a full refresh replaced the lake table as batch 2" in kind.warnings[0]


def test_a_known_full_refresh_changes_nothing() -> None:
    table = table_spec()
    kind = kind_of_run(table, request(table), stored(table), lake(replaced_batch=1), None)
    assert not kind.replace_all


def test_a_backfill_over_an_unrecorded_full_refresh_is_refused() -> None:
    table = table_spec()
    with pytest.raises(WriteError, match="never recorded"):
        kind_of_run(
            table, request(table, backfill=True), stored(table), lake(replaced_batch=2), None
        )


@pytest.mark.parametrize(("before", "after"), [(None, "deleted"), ("deleted", None)])
def test_a_changed_delete_column_reads_a_merge_table_whole(
    before: str | None, after: str | None
) -> None:
    then, now = table_spec(delete_column=before), table_spec(delete_column=after)
    kind = kind_of_run(now, request(now), stored(then), lake(), None)
    assert kind.replace_all
    assert "delete_column changed" in kind.warnings[0]


def test_a_changed_delete_column_over_an_empty_lake_needs_no_full_refresh() -> None:
    then, now = table_spec(), table_spec(delete_column="deleted")
    empty = lake(held=(), head=None)
    assert changed_delete_column(now, request(now), stored(then), empty) is None


def test_a_key_weight_the_lakes_rows_lack_reads_the_table_whole() -> None:
    table = table_spec()
    source = SourceFacts(schema=SCHEMA, match_key=("_weight_id",), weighed_by={"_weight_id": "c"})
    kind = kind_of_run(table, request(table), stored(table), lake(), source)
    assert kind.replace_all and "don't carry _weight_id" in kind.warnings[0]


def test_a_lake_in_appends_layout_is_not_read_whole_for_a_weight_but_refused_for_its_mode() -> None:
    """Found by the soak (--database mariadb --format iceberg --seed 9203): append turned merge
    with a text key on MariaDB was read whole for the key's weight, not refused like any other
    mode change."""
    table = table_spec()
    source = SourceFacts(schema=SCHEMA, match_key=("_weight_id",), weighed_by={"_weight_id": "c"})
    with pytest.raises(ConfigError, match="field 'mode'"):
        kind_of_run(table, request(table), stored(table), lake(held=BATCHES), source)


def test_a_key_weight_under_another_collation_reads_the_table_whole() -> None:
    table = table_spec()
    weighed = {"columns": ["_weight_id"], "weighed_by": {"_weight_id": "latin1_swedish_ci"}}
    schema = T.StructType([*SCHEMA.fields, T.StructField("_weight_id", T.BinaryType())])
    source = SourceFacts(
        schema=schema, match_key=("_weight_id",), weighed_by={"_weight_id": "utf8mb4_general_ci"}
    )
    kind = kind_of_run(
        table, request(table), stored(table), lake(schema=schema, key=weighed), source
    )
    assert kind.replace_all
    assert "_weight_id from latin1_swedish_ci to utf8mb4_general_ci" in kind.warnings[0]


def test_without_the_sources_facts_the_weights_are_left_to_the_run_that_reads_it() -> None:
    table = table_spec()
    kind = kind_of_run(table, request(table), stored(table), lake(), None)
    assert not kind.replace_all


# -- whether the run's commit is still the lake's last as it records ------------------------------


@pytest.mark.parametrize(
    "now",
    [
        LakeHead(table_id=TABLE_ID, txn=TXN, batch=2),
        # Maintenance after the commit makes snapshots, not commits of a run: the head stays.
        LakeHead(table_id=TABLE_ID, txn=TXN, batch=2, snapshot_id=7),
        None,
    ],
)
def test_a_run_whose_commit_is_still_the_last_records(now: LakeHead | None) -> None:
    check_still_last(table_spec(), LakeHead(table_id=TABLE_ID, txn=TXN, batch=2), now)
    check_still_last(table_spec(), None, now)  # nothing in the lake to record


def test_a_run_overtaken_by_another_runs_commit_records_nothing() -> None:
    ended = LakeHead(table_id=TABLE_ID, txn=TXN, batch=2)
    with pytest.raises(ConcurrentRunError) as raised:
        check_still_last(table_spec(), ended, LakeHead(table_id=TABLE_ID, txn=NEXT_TXN, batch=2))
    said = str(raised.value)
    assert f"after this run's commit {TXN}: the lake's last commit is now {NEXT_TXN}" in said
    assert "records nothing" in said and "pool limit" in said


# -- whether the lake fits ----------------------------------------------------------------------


def test_the_lake_its_cursor_describes_fits() -> None:
    check_lake_fits(table_spec(), stored(), lake())


def test_one_commit_past_the_recorded_one_fits_a_run_that_died_before_recording_it() -> None:
    head = LakeHead(
        table_id=TABLE_ID, txn=NEXT_TXN, batch=2, files=files_digest(f.name for f in BUCKETS)
    )
    check_lake_fits(table_spec(), stored(), lake(head=head))


@pytest.mark.parametrize(
    ("facts", "found"),
    [
        (lake(held=(), head=None), "it holds no table"),
        (lake(head=None), "no record of the table's identity"),
        (
            lake(head=LakeHead(table_id="other", txn=TXN, batch=1)),
            "it holds lake table other",
        ),
        (
            replace(lake(), files=BUCKETS[:1]),
            "left 4 data files, and the folder now holds 1 others",
        ),
        (
            lake(head=LakeHead(table_id=TABLE_ID, txn="20241231T000000cccccccc", batch=0)),
            "restored from an older copy",
        ),
        (
            lake(head=LakeHead(table_id=TABLE_ID, txn=NEXT_TXN, batch=3)),
            "another Dagster instance writes to it",
        ),
    ],
    ids=["gone", "no-identity", "another-table", "files-removed", "older-commit", "two-past"],
)
def test_a_lake_that_isnt_the_table_the_cursor_describes_is_refused(
    facts: LakeFacts, found: str
) -> None:
    with pytest.raises(WriteError) as refused:
        check_lake_fits(table_spec(), stored(), facts)
    text = str(refused.value)
    assert found in text and "incremental-assets run orders --full" in text


def test_a_lake_in_the_other_modes_layout_is_refused_naming_mode() -> None:
    append = table_spec(mode="append", primary_key=None)
    with pytest.raises(ConfigError) as refused:
        check_lake_fits(append, stored(), lake())
    assert "field 'mode'" in str(refused.value)
    with pytest.raises(ConfigError):
        check_lake_fits(table_spec(), stored(), lake(held=BATCHES))


def test_a_state_recorded_before_lake_identities_only_refuses_an_emptied_lake() -> None:
    legacy = stored(lake_table_id=None, lake_commit=None)
    check_lake_fits(table_spec(), legacy, lake(head=None))
    with pytest.raises(WriteError, match="it has no data files"):
        check_lake_fits(table_spec(), legacy, lake(held=(), head=None))


# -- whether the source enforces the key ----------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "catalog_key", "enforced"),
    [
        ({}, ("id",), True),
        ({"primary_key": ["id", "note"]}, ("note", "id"), True),
        ({}, ("id", "note"), False),
        ({}, None, False),
        ({"table": None, "query": "SELECT * FROM public.orders"}, ("id",), False),
        ({"mode": "append", "primary_key": None}, ("id",), False),
    ],
    ids=["own-key", "same-columns", "other-key", "unread", "query", "append"],
)
def test_the_key_is_enforced_only_when_it_is_the_source_tables_own(
    settings: dict[str, Any], catalog_key: tuple[str, ...] | None, enforced: bool
) -> None:
    source = SourceFacts(schema=SCHEMA, catalog_key=catalog_key)
    assert key_enforced(table_spec(**settings), source) is enforced


# -- replace_all and read_to_newest, decided once for both paths -----------------------------------

FULL = {"full_refresh": True}


@pytest.mark.parametrize(
    ("settings", "asked", "state", "held", "replaces", "to_newest"),
    [
        ({}, {}, {}, BUCKETS, False, False),  # a plain incremental run
        ({}, FULL, {}, BUCKETS, True, True),  # asked, over a lake with rows: up to the newest
        ({}, FULL, {}, (), True, False),  # asked, over an empty lake: up to the bound
        ({"mode": "full_refresh", "cursor": "updated_at"}, {}, {}, BATCHES, True, True),
        ({"mode": "full_refresh", "cursor": "updated_at"}, {}, {}, (), True, True),
        ({"mode": "append", "cursor": None, "primary_key": None}, {}, {}, BATCHES, True, True),
        ({}, {}, {"cursor": None}, BUCKETS, True, True),  # after `cursor reset`
        ({}, {"backfill": True}, {}, BUCKETS, False, False),  # a backfill adds, bounded
    ],
)
def test_whether_a_run_replaces_the_table_and_how_far_it_reads(
    settings: dict[str, Any],
    asked: dict[str, bool],
    state: dict[str, Any],
    held: tuple[DataFile, ...],
    replaces: bool,
    to_newest: bool,
) -> None:
    table = table_spec(**settings)
    facts = lake(held=held) if held else lake(held=(), head=None)
    recorded = stored(table, **state) if held else stored(table, lake_table_id=None, row_count=0)

    kind = kind_of_run(table, request(table, **asked), recorded, facts, None)

    assert (kind.replace_all, kind.read_to_newest) == (replaces, to_newest)


def test_a_run_that_adds_refuses_a_lake_that_doesnt_fit_before_the_source_is_asked() -> None:
    """`kind_of_run` is called before the bounds query: a moved lake is refused there."""
    table = table_spec()
    gone = lake(held=(), head=None)

    with pytest.raises(WriteError, match="not the table the stored cursor describes"):
        kind_of_run(table, request(table), stored(table), gone, None)
    assert kind_of_run(
        table, request(table, full_refresh=True), stored(table), gone, None
    ).replace_all


@pytest.mark.parametrize(
    ("settings", "version", "refused"),
    [
        ({}, 3, True),  # position_deletes, the default, on a format v3 table
        ({"mode": "merge", "merge_writes": "deletion_vectors"}, 3, False),
        ({"merge_writes": "copy_on_write"}, 3, False),  # v3 allows it: it writes no deletes
        ({}, 2, False),
        ({"mode": "append"}, 3, False),  # an append writes no deletes
        ({}, None, False),  # a plain Parquet lake
    ],
)
def test_a_merge_writes_setting_the_tables_format_cant_take_is_refused_on_any_run(
    settings: dict[str, Any], version: int | None, refused: bool
) -> None:
    table = table_spec(**settings)
    facts = lake(format_version=version)
    if settings.get("mode") == "append":
        facts = lake(BATCHES, format_version=version)

    for full_refresh in (False, True):
        asked = request(table, full_refresh=full_refresh)
        if refused:
            with pytest.raises(ConfigError, match="set merge_writes: deletion_vectors"):
                kind_of_run(table, asked, stored(table), facts, None)
        else:
            kind_of_run(table, asked, stored(table), facts, None)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"merge_writes": "deletion_vectors"}, "merge_writes"),  # can move the table to v3
        ({"buckets": 8}, "buckets"),
        ({"bucket_rows": 1000}, "bucket_rows"),
        ({"delete_column": "deleted"}, "delete_column"),
    ],
)
def test_a_change_of_what_shapes_a_merge_table_moves_its_code_version_and_is_named(
    change: dict[str, Any], named: str
) -> None:
    table, changed = table_spec(), table_spec(**change)
    lake_spec = LakeSpec(path="/lake", format="parquet")

    assert settings_digest(changed, lake_spec) != settings_digest(table, lake_spec)
    assert set(changed_settings(request(table).settings, request(changed).settings)) == {named}


def test_a_change_of_the_lakes_codec_moves_every_tables_code_version_and_is_named() -> None:
    table = table_spec()
    zstd, snappy = (
        LakeSpec(path="/lake", format="parquet"),
        LakeSpec(path="/lake", format="parquet", compression="snappy"),
    )

    assert settings_digest(table, zstd) != settings_digest(table, snappy)
    assert changed_settings(
        settings_text(table, zstd, "parquet"), settings_text(table, snappy, "parquet")
    ) == {"compression": ("zstd", "snappy")}


def test_a_setting_the_stored_record_lacks_is_not_a_change() -> None:
    """Runs recorded before a setting was listed don't all count as changed after an upgrade."""
    table, lake_spec = table_spec(), LakeSpec(path="/lake", format="parquet")
    now = json.loads(settings_text(table, lake_spec, "parquet"))
    recorded = {k: v for k, v in now.items() if k not in ("compression", "merge_writes")}

    assert changed_settings(json.dumps(recorded), json.dumps(now)) == {}
    assert changed_settings(json.dumps({**recorded, "mode": "append"}), json.dumps(now)) == {
        "mode": ("append", "merge")
    }
