"""`lake convert`: a table's plain Parquet lake becomes an Iceberg table, keeping its cursor."""

from __future__ import annotations

import argparse

from incremental_assets.cli.context import (
    actor,
    asset_key,
    open_instance,
    project_and_tables,
    table_lock,
)
from incremental_assets.conversion import convert_to_iceberg
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.state import read_stored_state, record_cursor_override
from incremental_assets.translator import translator_for


def convert(args: argparse.Namespace) -> int:
    project, (table,) = project_and_tables(args, [args.table])
    identifier = translator_for(project).lake_table_name(table)
    with open_instance() as instance, table_lock(project, table, "lake convert"):
        key = asset_key(project, table)
        stored = read_stored_state(instance, key)
        spark = IncrementalSparkResource.from_spec(project.spark)
        try:
            converted = convert_to_iceberg(
                spark.spark_session, table, project.lake, identifier, stored
            )
        finally:
            spark.stop()
        note = (
            f"{args.reason} (converted to Iceberg by {actor()} "
            "with incremental-assets lake convert)"
        )
        record_cursor_override(
            instance,
            key,
            stored,
            stored.cursor,
            stored.cursor_column,
            stored.cursor_type,
            note,
            converted=converted.head,
        )
    print(
        f"{table.name}: {converted.files} data files ({converted.rows} rows) are now Iceberg table "
        f"{identifier} at snapshot {converted.head.snapshot_id}; the cursor stays at "
        f"{stored.cursor}"
    )
    return 0
