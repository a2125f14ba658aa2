"""Session-wide PostgreSQL, MariaDB and Spark; a fresh schema or database, lake, project and
Dagster instance per test. Fixtures only: what they are built from lives in support/.

A test that takes `lake_format` runs once per lake format, and its `make_project` writes that
format; the projects of `make_project` and `write_cli_config` in other tests say `format:
parquet`. The few configurations written whole (the component's, the UI's, the sensors', the
definitions') leave the format unset, and so run on the default for new tables (`NEW_TABLES`,
Iceberg)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from incremental_assets.config import SparkSpec
from incremental_assets.jvm import jar_folder
from incremental_assets.lake.table import LakeFormat
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.databases import KINDS, SourceDb
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.mariadb import (
    Database,
    MariaDbServer,
    fresh_database,
    mariadb_server,
)
from incremental_assets_tests.support.postgres import (
    PostgresServer,
    Schema,
    catalog_database,
    fresh_schema,
    postgres_server,
)
from incremental_assets_tests.support.project import (
    LAKE_FORMATS,
    SHIPPED_DAGSTER_YAML,
    ProjectBuilder,
    new_instance_home,
)
from incremental_assets_tests.support.readers import History, merge_history
from incremental_assets_tests.support.s3 import S3Server, s3_server
from incremental_assets_tests.support.spark import (
    TEST_SPARK_CONF,
    class_archive,
    connect_server,
    jvm_options,
)
from incremental_assets_tests.support.sqlite import skip_sqlite_syncs


def pytest_configure(config: pytest.Config) -> None:
    """The options of every JVM the suite starts, set once, before xdist's workers start (they
    inherit them): the archive of a session's classes is made here the first time. In each
    process, SQLite skips fsync (`skip_sqlite_syncs`)."""
    skip_sqlite_syncs()
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    archive = class_archive(sys.executable, jar_folder().parent / "class-archives")
    os.environ["SPARK_SUBMIT_OPTS"] = jvm_options(archive)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
def pg(postgres: PostgresServer) -> Iterator[Schema]:
    with fresh_schema(postgres) as schema:
        yield schema


@pytest.fixture
def pg_catalog(postgres: PostgresServer) -> Iterator[str]:
    """An Iceberg catalog's database on the suite's PostgreSQL: its SQLAlchemy URI."""
    with catalog_database(postgres) as uri:
        yield uri


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDbServer]:
    with mariadb_server() as server:
        yield server


@pytest.fixture
def my(mariadb: MariaDbServer) -> Iterator[Database]:
    """A fresh MariaDB database for one test."""
    with fresh_database(mariadb) as database:
        yield database


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest) -> SourceDb:
    """The test's source on PostgreSQL, then on MariaDB."""
    if request.param == "postgres":
        schema = request.getfixturevalue("pg")
        return SourceDb("postgres", schema, request.getfixturevalue("postgres"))
    return SourceDb("mariadb", request.getfixturevalue("my"), request.getfixturevalue("mariadb"))


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1, for lakes on an object store."""
    with s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def connect() -> Iterator[str]:
    """A Spark Connect server for runs in subprocesses: they connect instead of starting a JVM
    each."""
    with connect_server() as url:
        yield url


@pytest.fixture(scope="session")
def spark_resource() -> Iterator[IncrementalSparkResource]:
    """The resource the assets use, started once; tests share its session."""
    resource = IncrementalSparkResource.from_spec(
        SparkSpec(master="local[2]", conf=TEST_SPARK_CONF)
    )
    session = resource.spark_session
    yield resource
    session.stop()


@pytest.fixture(scope="session")
def spark(spark_resource: IncrementalSparkResource) -> SparkSession:
    return spark_resource.spark_session


@pytest.fixture
def instance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A real instance on disk (SQLite), as DAGSTER_HOME would give, with the shipped
    dagster.yaml (each table's pool one run), unless the test is marked `pools_off`. Its empty
    storage is a copy of one Dagster made for the worker (`new_instance_home`)."""
    home = tmp_path / "dagster_home"
    pools_off = request.node.get_closest_marker("pools_off")
    new_instance_home(home, None if pools_off else SHIPPED_DAGSTER_YAML)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


@pytest.fixture(params=LAKE_FORMATS)
def lake_format(request: pytest.FixtureRequest) -> LakeFormat:
    """The test's lake format: plain Parquet, then Iceberg."""
    format_: LakeFormat = request.param
    return format_


@pytest.fixture
def make_project(request: pytest.FixtureRequest, tmp_path: Path) -> ProjectBuilder:
    """Writes the test's project in tmp_path: `make_project(pg, "orders", mode="merge", ...)`,
    with the test's `lake_format` if it takes one, else plain Parquet."""
    if "lake_format" in request.fixturenames:
        return ProjectBuilder(tmp_path, request.getfixturevalue("lake_format"))
    return ProjectBuilder(tmp_path)


@pytest.fixture
def loads(
    make_project: ProjectBuilder,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> Loads:
    """The test's project (written by `make_project`), instance and Spark resource in one:
    `loads.configure(pg, ORDERS_MERGE)`, then `loads.run()`, `loads.rows(["id"])`, ..."""
    return Loads(make_project, instance, spark_resource)


@pytest.fixture(scope="module")
def merge_lake(
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Loads, History]]:
    """An Iceberg merge table's three runs (`merge_history`), made once for a module whose tests
    only read it: its loads (project, instance on disk) and each run's metadata and rows."""
    home = new_instance_home(tmp_path_factory.mktemp("dagster_home"))
    with fresh_schema(postgres) as pg, dg.DagsterInstance.from_config(str(home)) as instance:
        loads = Loads(ProjectBuilder(tmp_path_factory.mktemp("project")), instance, spark_resource)
        yield loads, merge_history(loads, pg)
