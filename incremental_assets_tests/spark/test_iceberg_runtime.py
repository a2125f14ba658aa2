"""The suite's session has what `jvm.py` gives every session: Iceberg's runtime and SQL extensions,
and SQLite's driver where Iceberg's JDBC catalog looks for it (java.sql.DriverManager)."""

from __future__ import annotations

from pyspark.sql import SparkSession


def test_the_sessions_run_merge_into_and_call_on_an_iceberg_jdbc_catalog(
    spark: SparkSession, catalog: str
) -> None:
    table = f"{catalog}.shop.orders"
    spark.sql(f"CREATE NAMESPACE {catalog}.shop")
    spark.sql(f"CREATE TABLE {table} (id bigint, status string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'new'), (2, 'new')")
    spark.createDataFrame(
        [(2, "paid"), (3, "new")], "id bigint, status string"
    ).createOrReplaceTempView("delta")

    spark.sql(
        f"MERGE INTO {table} t USING delta d ON t.id = d.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    expired = spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => 'shop.orders', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ).collect()

    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")  # Iceberg's extensions' SQL

    rows = spark.sql(f"SELECT id, status FROM {table} ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(1, "new"), (2, "paid"), (3, "new")]
    assert len(expired) == 1 and spark.sql(f"SELECT * FROM {table}.snapshots").count() == 1
    refs = spark.sql(f"SELECT name FROM {table}.refs ORDER BY name").collect()
    assert [r.name for r in refs] == ["audit", "main"]
