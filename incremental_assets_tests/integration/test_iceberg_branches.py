"""Branches of an Iceberg table that aren't a run's: a commit drops only the branches runs left
(`ia-<commit id>`, a day on), never another tool's, whatever its name."""

from __future__ import annotations

from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import change_orders, create_orders
from incremental_assets_tests.support.postgres import Schema


def test_another_tools_branch_named_like_ours_survives_the_next_commit(
    loads: Loads, pg: Schema
) -> None:
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_MERGE, lake={"format": "iceberg"})
    assert loads.run().success
    iceberg = open_lake(loads.project.lake, "orders")
    assert isinstance(iceberg, IcebergLake)
    spark = iceberg.session(loads.spark_resource.spark_session)
    spark.sql(f"ALTER TABLE {iceberg.reference()} CREATE BRANCH `ia-keep-me`")
    change_orders(pg, 1)

    result = loads.run()

    assert result.success, result.failure
    state = iceberg.state()
    assert state is not None and state.current_snapshot_id is not None
    assert set(state.refs) == {"main", "ia-keep-me"}
    assert state.refs["ia-keep-me"] != state.current_snapshot_id  # main moved on, it stayed
