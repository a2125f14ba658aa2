"""One catalog for Spark and PyIceberg, its secrets never printed, and what a source column is in
an Iceberg table: the catalog's properties as each client takes them, and the types."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec
from incremental_assets.lake.iceberg.catalog import catalog_of
from incremental_assets.lake.iceberg.metadata import misplacement, same_location
from incremental_assets.lake.iceberg.records import state_from_json
from incremental_assets.lake.iceberg.schema import promotable, spark_schema, storable


def test_the_default_catalog_is_the_lakes_own_sqlite_file_in_wal_mode(tmp_path: Path) -> None:
    catalog = catalog_of(LakeSpec(path=str(tmp_path)))

    assert catalog.own and catalog.name == "incremental_assets"
    assert catalog.pyiceberg == {"type": "sql", "uri": f"sqlite:///{tmp_path}/_catalog.db"}
    assert catalog.sqlite_path == f"{tmp_path}/_catalog.db"
    conf = catalog.spark_conf()
    assert conf["spark.sql.catalog.incremental_assets"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.incremental_assets.type"] == "jdbc"
    assert conf["spark.sql.catalog.incremental_assets.uri"] == (
        f"jdbc:sqlite:{tmp_path}/_catalog.db?journal_mode=WAL&busy_timeout=30000"
    )
    assert conf["spark.sql.catalog.incremental_assets.jdbc.schema-version"] == "V1"
    # Spark would otherwise read a table as it cached it, missing other writers' commits.
    assert conf["spark.sql.catalog.incremental_assets.cache-enabled"] == "false"


def test_a_postgresql_catalog_is_the_same_database_for_both_clients(tmp_path: Path) -> None:
    uri = "postgresql+psycopg2://etl:s3cr%40t@db.example:5433/catalog?sslmode=require"
    spec = LakeSpec(path=str(tmp_path), catalog={"type": "sql", "uri": uri, "name": "lake"})

    catalog = catalog_of(spec)

    assert not catalog.own and catalog.name == "lake"
    assert catalog.pyiceberg["uri"] == uri
    assert catalog.spark["uri"] == "jdbc:postgresql://db.example:5433/catalog?sslmode=require"
    assert (catalog.spark["jdbc.user"], catalog.spark["jdbc.password"]) == ("etl", "s3cr@t")


def test_a_rest_catalog_and_its_object_store_properties_pass_through(tmp_path: Path) -> None:
    spec = LakeSpec(
        path="s3://bucket/lake",
        catalog={
            "type": "rest",
            "uri": "https://catalog.example/api",
            "credential": "id:secret",
            "s3.endpoint": "http://127.0.0.1:9000",
            "s3.region": "eu-west-1",
        },
    )

    spark = catalog_of(spec).spark

    assert spark["type"] == "rest" and spark["uri"] == "https://catalog.example/api"
    assert spark["io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert spark["s3.endpoint"] == "http://127.0.0.1:9000"
    assert spark["client.region"] == "eu-west-1"
    assert spark["warehouse"] == "s3://bucket/lake"


@pytest.mark.parametrize(
    "message",
    [
        "could not connect to postgresql+psycopg2://etl:s3cr%40t@db.example:5433/catalog",
        "FATAL: password authentication failed; password was s3cr@t",
        "token abc-123 was refused",
    ],
)
def test_no_secret_of_the_catalog_survives_redaction(tmp_path: Path, message: str) -> None:
    uri = "postgresql+psycopg2://etl:s3cr%40t@db.example:5433/catalog"
    spec = LakeSpec(path=str(tmp_path), catalog={"type": "sql", "uri": uri, "token": "abc-123"})
    catalog = catalog_of(spec)

    redacted = catalog.redact(message)

    for secret in ("s3cr%40t", "s3cr@t", "abc-123"):
        assert secret not in redacted
    assert "***" in redacted
    assert "s3cr" not in catalog.describe() and "db.example" in catalog.describe()


QUERY_URI = (
    "postgresql+psycopg2://db.example:5433/catalog?user=etl&password=s3cr%40t&sslmode=require"
)


@pytest.mark.parametrize(
    ("message", "redacted"),
    [
        pytest.param(
            f"could not connect to {QUERY_URI}",
            "could not connect to postgresql+psycopg2://db.example:5433/catalog?user=etl"
            "&password=***&sslmode=require",
            id="the catalog's URI, password in its query",
        ),
        pytest.param(
            "jdbc:postgresql://db.example:5433/catalog?user=etl&password=s3cr@t refused",
            "jdbc:postgresql://db.example:5433/catalog?user=etl&password=*** refused",
            id="as Spark's JDBC URL",
        ),
        pytest.param(
            "jdbc:mysql://other:3306/db?password=hunter2&user=x; "
            "jdbc:sqlserver://other;user=x;password=hunter2;encrypt=true",
            "jdbc:mysql://other:3306/db?password=***&user=x; "
            "jdbc:sqlserver://other;user=x;password=***;encrypt=true",
            id="any URI's query password, known or not",
        ),
        pytest.param(
            "postgresql://etl:hunter2@other/db",
            "postgresql://etl:***@other/db",
            id="any URI's user:password@",
        ),
        pytest.param(
            "FATAL: password was s3cr@t, 's3cr@t' or \"s3cr@t\" (key=s3cr@t&x)",
            "FATAL: password was ***, '***' or \"***\" (key=***&x)",
            id="the password wherever it is a whole value",
        ),
        pytest.param(
            "s3cr@tive is not s3cr@t",
            "s3cr@tive is not ***",
            id="not inside a longer word",
        ),
        pytest.param(
            "token s refused: sessions start slowly, s/x:s",
            "token *** refused: sessions start slowly, ***/x:***",
            id="a one-letter secret, only where it stands alone",
        ),
    ],
)
def test_a_secret_is_redacted_where_it_stands_as_a_whole_value(
    tmp_path: Path, message: str, redacted: str
) -> None:
    spec = LakeSpec(path=str(tmp_path), catalog={"type": "sql", "uri": QUERY_URI, "token": "s"})
    catalog = catalog_of(spec)

    assert catalog.redact(message) == redacted


def test_a_catalog_described_shows_no_password_of_its_uris_query(tmp_path: Path) -> None:
    spec = LakeSpec(path=str(tmp_path), catalog={"type": "sql", "uri": QUERY_URI})

    described = catalog_of(spec).describe()

    assert described == (
        "postgresql+psycopg2://db.example:5433/catalog?user=etl&password=***&sslmode=require"
    )


def _state(location: str) -> object:
    return state_from_json(
        {"table-uuid": "u", "location": location, "current-snapshot-id": -1},
        f"{location}/metadata/v1.metadata.json",
    )


def test_a_table_whose_metadata_lives_elsewhere_is_misplaced() -> None:
    """A lake copied with its catalog: the copy's catalog still names the old folder (Iceberg's
    locations are absolute), so the table is not this lake's table."""
    assert same_location("file:/lake/orders", "/lake/orders")
    assert same_location("file:///lake/orders/", "/lake/orders")
    assert misplacement(_state("file:/lake/orders"), "/lake/orders") is None  # type: ignore[arg-type]
    moved = misplacement(_state("file:/old/orders"), "/lake/orders")  # type: ignore[arg-type]
    assert moved is not None and "/old/orders" in moved.reason and "moved" in moved.reason


def test_an_iceberg_schema_reads_as_spark_types() -> None:
    schema = {
        "fields": [
            {"id": 1, "name": "id", "type": "long", "required": True},
            {"id": 2, "name": "at", "type": "timestamptz", "required": False},
            {"id": 3, "name": "wall", "type": "timestamp", "required": False},
            {"id": 4, "name": "amount", "type": "decimal(12, 2)", "required": False},
            {
                "id": 5,
                "name": "tags",
                "type": {
                    "type": "list",
                    "element-id": 6,
                    "element": "int",
                    "element-required": False,
                },
                "required": False,
            },
        ]
    }

    spark = spark_schema(schema)

    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in spark.fields] == [
        ("id", "bigint", False),
        ("at", "timestamp", True),
        ("wall", "timestamp_ntz", True),
        ("amount", "decimal(12,2)", True),
        ("tags", "array<int>", True),
    ]


def test_a_source_schema_is_compared_as_iceberg_holds_it() -> None:
    """Iceberg has no 8- or 16-bit integers: a tinyint column is an int column, not one narrowed."""
    source = T.StructType(
        [
            T.StructField("flag", T.ByteType()),
            T.StructField("n", T.ShortType()),
            T.StructField("codes", T.ArrayType(T.ShortType())),
            T.StructField("name", T.StringType()),
        ]
    )

    held = storable(source)

    assert isinstance(held, T.StructType)
    assert [f.dataType.simpleString() for f in held.fields] == [
        "int",
        "int",
        "array<int>",
        "string",
    ]


@pytest.mark.parametrize(
    ("old", "new", "in_place"),
    [
        (T.IntegerType(), T.LongType(), True),
        (T.FloatType(), T.DoubleType(), True),
        (T.DecimalType(10, 2), T.DecimalType(12, 2), True),
        (T.DecimalType(10, 2), T.DecimalType(12, 4), False),  # the scale: rows rewritten
        (T.LongType(), T.DecimalType(20, 0), False),
    ],
)
def test_only_icebergs_type_promotions_change_a_column_in_place(
    old: T.DataType, new: T.DataType, in_place: bool
) -> None:
    assert promotable(old, new) is in_place
