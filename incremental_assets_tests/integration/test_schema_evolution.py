"""Columns added, types widened, and changes the lake can't hold, on both lake formats."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import iceberg_table, lake_file_paths, rows_by

DEFAULTS = {
    "name": "items",
    "cursor": "at",
    "primary_key": ["id"],
    "transaction_cap": False,
    "buckets": 4,
}


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_an_added_column_appears_with_nulls_for_older_rows_to_every_reader(
    loads: Loads,
    pg: Schema,
    spark: SparkSession,
    lake_format: LakeFormat,
    mode: str,
) -> None:
    pg.execute(
        "CREATE TABLE items (id int PRIMARY KEY, qty int, label varchar(10), at int NOT NULL)"
    )
    pg.execute("INSERT INTO items SELECT i, i, 'x', i FROM generate_series(1, 40) i")
    loads.configure(pg, DEFAULTS, mode=mode)
    assert loads.run().success
    pg.execute(
        "ALTER TABLE items ADD COLUMN colour text",
        "ALTER TABLE items ALTER COLUMN qty TYPE bigint",  # a widening
        "ALTER TABLE items ALTER COLUMN label TYPE varchar(100)",
    )
    pg.execute("INSERT INTO items VALUES (41, 5000000000, 'a much longer label', 41, 'red')")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["schema_change"] == "added colour; widened qty int -> bigint"
    lake = loads.lake()
    assert rows_by(lake, ["id", "qty", "colour"])[-2:] == [(40, 40, None), (41, 5000000000, "red")]
    assert str(lake.schema.field("qty").type) == "int64"
    if lake_format == "parquet":
        # Plain readers take one file's schema; every file now has the new one.
        files = [pq.read_schema(path) for path in lake_file_paths(loads.lake_dir, "items")]
        schemas = {tuple((field.name, str(field.type)) for field in schema) for schema in files}
        assert len(schemas) == 1
        row = spark.read.parquet(str(loads.lake_dir / "items")).where("id = 41").first()
    else:
        # Iceberg evolves the schema in place: the older files keep theirs, readers see the new.
        iceberg = IcebergLake(loads.project.lake, "items", "incremental_assets.items")
        row = iceberg.session(spark).read.table(iceberg.reference()).where("id = 41").first()
    assert row is not None and row["colour"] == "red" and row["qty"] == 5000000000


def test_an_incompatible_change_fails_before_anything_is_written(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, qty int, at int NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i, i FROM generate_series(1, 10) i")
    loads.configure(pg, DEFAULTS, mode="append")
    first = loads.run()
    files = loads.files()
    pg.execute(
        "ALTER TABLE items ALTER COLUMN qty TYPE text",
        "INSERT INTO items VALUES (11, 'eleven', 11)",
    )

    run = loads.run()

    assert not run.success
    assert "column 'qty' is int in the lake but string in the source" in (run.failure or "")
    assert loads.files() == files
    assert loads.metadata()["cursor"] == first.metadata["cursor"]


@pytest.mark.parametrize("change", ["added", "widened"])
def test_a_merge_run_that_only_changes_the_schema_applies_it(
    loads: Loads,
    db: SourceDb,
    lake_format: LakeFormat,
    change: str,
) -> None:
    """Found by the model-based test: no bucket is touched, yet the lake's schema must change."""
    db.execute("CREATE TABLE items (id int PRIMARY KEY, qty int, at int NOT NULL)")
    db.execute("INSERT INTO items VALUES (1, 1, 100), (2, 2, 100)")
    loads.configure(db, DEFAULTS, mode="merge")
    assert loads.run().success
    if change == "added":
        db.execute("ALTER TABLE items ADD COLUMN note {text}")
    else:
        db.execute(db.alter_type("items", "qty", "bigint"))

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["rows_written"] == 0
    lake = loads.lake()
    if change == "added":
        assert rows_by(lake, ["id", "note"]) == [(1, None), (2, None)]
    else:
        assert lake.schema.field("qty").type == pa.int64()
        assert rows_by(lake, ["id", "qty"]) == [(1, 1), (2, 2)]


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_an_integer_cursor_widened_to_a_decimal_carries_on_past_bigint(
    loads: Loads,
    db: SourceDb,
    lake_format: LakeFormat,
    mode: str,
) -> None:
    """BIGINT -> BIGINT UNSIGNED (MySQL) or numeric(20,0): a widening, not a full refresh."""
    db.execute("CREATE TABLE items (id int PRIMARY KEY, at bigint NOT NULL)")
    db.execute("INSERT INTO items VALUES (1, 10), (2, 20)")
    loads.configure(db, DEFAULTS, mode=mode)
    assert loads.run().success
    wide = "bigint unsigned" if db.kind == "mariadb" else "numeric(20,0)"
    db.execute(db.alter_type("items", "at", wide))
    db.execute(f"INSERT INTO items VALUES (3, {2**63 + 5}), (4, 30)")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["cursor"] == str(2**63 + 5)
    assert "widened at bigint -> decimal(20,0)" in run.metadata["schema_change"]
    lake = loads.lake()
    assert lake.schema.field("at").type == pa.decimal128(20, 0)
    assert rows_by(lake, ["id", "at"]) == [(1, 10), (2, 20), (3, 2**63 + 5), (4, 30)]


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_a_decimal_given_more_scale_rewrites_every_file_in_the_same_commit(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
    mode: str,
) -> None:
    """Iceberg can't change a decimal's scale in place: the commit replaces every file, so no
    file of the new snapshot has the old type, and the snapshot before reads as it did."""
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, price numeric(10,2), at int NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i + 0.25, i FROM generate_series(1, 20) i")
    loads.configure(pg, DEFAULTS, mode=mode)
    first = loads.run()
    assert first.success, first.failure
    pg.execute(
        "ALTER TABLE items ALTER COLUMN price TYPE numeric(14,4)",
        "INSERT INTO items VALUES (21, 21.1234, 21)",
    )

    run = loads.run()

    assert run.success, run.failure
    assert "widened price decimal(10,2) -> decimal(14,4)" in run.metadata["schema_change"]
    lake = loads.lake()
    assert lake.schema.field("price").type == pa.decimal128(14, 4)
    assert rows_by(lake, ["id", "price"]) == sorted(pg.query("SELECT id, price FROM items"))
    for path in lake_file_paths(loads.lake_dir, "items"):
        assert pq.read_schema(path).field("price").type == pa.decimal128(14, 4)
    if lake_format == "iceberg":
        table = iceberg_table(loads.lake_dir, "items")
        before = table.scan(snapshot_id=first.metadata["iceberg_snapshot_id"]).to_arrow()
        assert before.schema.field("price").type == pa.decimal128(10, 2)
        assert before.num_rows == 20
