"""When the check without Spark may try to prove a run has nothing new, and when it must leave
the run to Spark: every condition on its own, table-driven; and a lake that doesn't fit refused
there as the run with Spark refuses it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from incremental_assets.cursor import CursorType
from incremental_assets.errors import WriteError
from incremental_assets.lake.facts import LakeHead
from incremental_assets.nothing_new import checkable
from incremental_assets_tests.unit.test_decisions import (
    NEXT_TXN,
    TABLE_ID,
    lake,
    request,
    stored,
    table_spec,
)


def _state(**changes: Any) -> Any:
    table = table_spec()
    return replace(stored(table), window_fingerprint="3:abc", **changes)


def test_a_run_over_the_lake_it_recorded_may_be_proven_without_spark() -> None:
    table = table_spec()

    cursor = checkable(table, _state(), lake(), request(table))

    assert cursor is not None and (cursor.column, cursor.type) == (
        "updated_at",
        CursorType.TIMESTAMPTZ,
    )


@pytest.mark.parametrize(
    ("why", "settings", "asked", "state", "facts"),
    [
        ("a backfill", {}, {"backfill": True}, {}, {}),
        ("a full refresh asked for", {}, {"full_refresh": True}, {}, {}),
        ("no stored fingerprint", {}, {}, {"window_fingerprint": None}, {}),
        ("no stored cursor type", {}, {}, {"cursor_type": None}, {}),
        ("the cursor column changed", {}, {}, {"cursor_column": "created_at"}, {}),
        ("a row count check that needs Spark", {"checks": {"reconcile_counts": 0.01}}, {}, {}, {}),
        ("a commit waits to be finished", {}, {}, {}, {"pending": True}),
        ("no stored cursor (reset)", {}, {}, {"cursor": None}, {}),
        ("settings changed", {"delete_column": "deleted"}, {}, {}, {}),
        (
            "the lake's last commit is one the last run didn't record",
            {},
            {},
            {},
            {"head": LakeHead(table_id=TABLE_ID, txn=NEXT_TXN, batch=2)},
        ),
    ],
)
def test_anything_that_says_spark_must_run_leaves_the_run_to_it(
    why: str,
    settings: dict[str, Any],
    asked: dict[str, bool],
    state: dict[str, Any],
    facts: dict[str, Any],
) -> None:
    table = table_spec(**settings)
    recorded = replace(_state(), **state)
    asked_for = request(table, **asked)
    if "settings" not in why:
        recorded = replace(recorded, settings=asked_for.settings)

    assert checkable(table, recorded, lake(**facts), asked_for) is None, why


def test_a_lake_that_doesnt_fit_is_refused_as_the_run_with_spark_refuses_it() -> None:
    table = table_spec()
    other = LakeHead(table_id="another" * 4, txn=NEXT_TXN, batch=1)

    with pytest.raises(WriteError, match="not the table the stored cursor describes"):
        checkable(table, _state(), lake(head=other), request(table))
