from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest

from incremental_assets import state
from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType
from incremental_assets.metadata import TableMetadata, metadata_for
from incremental_assets.results import StoredState
from incremental_assets.state import (
    read_state_records,
    read_stored_state,
    record_cursor_override,
    record_of,
)
from incremental_assets_tests.support.load_results import load_result


def test_metadata_holds_the_cursor_as_exact_text_and_the_counts_as_numbers() -> None:
    metadata = metadata_for(load_result())
    assert metadata["cursor"] == dg.MetadataValue.text("2025-01-01T00:00:00.000001+00:00")
    assert metadata["previous_cursor"] == dg.MetadataValue.null()
    assert metadata["rows_inserted"] == dg.MetadataValue.int(5)
    assert metadata["rows_deleted"] == dg.MetadataValue.int(1)
    assert metadata["dagster/row_count"] == dg.MetadataValue.int(100)
    assert metadata["extract_seconds"] == dg.MetadataValue.float(1.235)
    schema = metadata["dagster/column_schema"].value
    assert isinstance(schema, dg.TableSchema)
    assert [c.name for c in schema.columns] == ["id", "_batch"]


def test_merge_counts_appear_only_for_merge() -> None:
    metadata = metadata_for(load_result(mode=Mode.APPEND, merge=None))
    assert not {"rows_inserted", "rows_updated", "rows_deleted"} & set(metadata)


def test_decimals_are_digits_never_floats() -> None:
    metadata = metadata_for(
        load_result(cursor_type=CursorType.DECIMAL, cursor=Decimal("0.10000000000000000001"))
    )
    assert metadata["cursor"].value == "0.10000000000000000001"


def test_the_stored_state_reads_back_what_was_written() -> None:
    state = TableMetadata.extract(metadata_for(load_result())).stored_state("run-1")
    assert state.cursor == "2025-01-01T00:00:00.000001+00:00"
    assert state.cursor_type is CursorType.TIMESTAMPTZ
    assert (state.cursor_column, state.batch, state.row_count, state.run_id) == (
        "updated_at",
        3,
        100,
        "run-1",
    )


def _materialize(instance: dg.DagsterInstance, cursor: datetime) -> None:
    metadata = metadata_for(load_result(cursor=cursor))
    instance.report_runless_asset_event(dg.AssetMaterialization("orders", metadata=metadata))


def _observe(instance: dg.DagsterInstance, times: int) -> None:
    for i in range(times):
        instance.report_runless_asset_event(
            dg.AssetObservation("orders", metadata={"seen_by": f"another tool {i}"})
        )


def test_a_hand_set_cursor_is_found_behind_any_number_of_other_observations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state, "_PAGE", 4)  # several pages without writing hundreds of events
    key = dg.AssetKey("orders")
    with dg.instance_for_test() as instance:
        _materialize(instance, datetime(2025, 1, 1, tzinfo=UTC))
        stored = read_stored_state(instance, key)
        record_cursor_override(
            instance,
            key,
            stored,
            "2024-06-01T00:00:00.000000+00:00",
            "updated_at",
            CursorType.TIMESTAMPTZ,
            "replay",
        )
        _observe(instance, 21)  # the reader used to look at the last 20 only

        records = read_state_records(instance, key)
        assert records.override is not None
        assert read_stored_state(instance, key).cursor == "2024-06-01T00:00:00.000000+00:00"

        _materialize(instance, datetime(2025, 2, 1, tzinfo=UTC))  # the run that honoured it
        assert read_state_records(instance, key).override is None
        assert read_stored_state(instance, key).cursor == "2025-02-01T00:00:00.000000+00:00"


def test_an_instance_written_before_the_metadata_record_keeps_its_cursor() -> None:
    """Events the 0.1 code recorded (a merge run, then `cursor set`), replayed into an instance."""
    written = json.loads(
        (Path(__file__).parent.parent / "data" / "events_written_by_0_1.json").read_text()
    )
    key = dg.AssetKey("orders")
    with dg.instance_for_test() as instance:
        materialization, override = (
            dg.deserialize_value(text, dg.EventLogEntry) for text in written
        )
        instance.store_event(materialization)
        assert read_stored_state(instance, key) == StoredState(
            cursor="2025-01-02T00:00:00.000001+00:00",
            cursor_column="updated_at",
            cursor_type=CursorType.TIMESTAMPTZ,
            batch=7,
            run_id=None,
            row_count=100,
            columns=(("id", "bigint"), ("_batch", "bigint")),
        )
        instance.store_event(override)
        records = read_state_records(instance, key)
        assert records.stored_state().cursor == "2024-12-31T00:00:00.000000+00:00"
        assert records.stored_state().batch == 7
        assert record_of(records.override).cursor_action == "set"
