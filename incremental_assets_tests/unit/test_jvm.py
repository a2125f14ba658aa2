from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from incremental_assets import jvm
from incremental_assets.cli import main as cli
from incremental_assets.config import SparkSpec, load_project
from incremental_assets.engine import _command as engine_command
from incremental_assets.engine import engine_folder, engine_settings, start_engine
from incremental_assets.errors import EngineError
from incremental_assets.resources import IncrementalSparkResource

PG_SOURCE = {"type": "jdbc", "url": "jdbc:postgresql://db:5432/shop"}
MYSQL_SOURCE = {"type": "jdbc", "url": "jdbc:mysql://db:3306/shop"}
MARIADB_SOURCE = {"type": "jdbc", "url": "jdbc:mariadb://db:3306/shop"}
FILES_SOURCE = {"type": "files", "path": "./landing"}
PG_CATALOG = {"type": "sql", "uri": "postgresql+psycopg2://app@db/catalog"}
REST_ON_S3 = {"type": "rest", "uri": "https://catalog", "warehouse": "s3://bucket/wh"}
BASE = [jvm.ICEBERG_RUNTIME, jvm.SQLITE_JDBC]


@pytest.fixture
def jar_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "jars"
    monkeypatch.setenv(jvm.JARS_ENV, str(folder))
    return folder


def _project_file(tmp_path: Path, source: dict[str, Any], **lake: Any) -> Path:
    config = {
        "lake": {"path": str(tmp_path / "lake"), **lake},
        "sources": {"db": source},
        "tables": [{"name": "orders", "source": "db", "table": "orders", "cursor": "at"}],
    }
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_five_jars_are_pinned_for_spark_4_1() -> None:
    assert [jar.coordinates for jar in jvm.ALL_JARS] == [
        "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0",
        "org.xerial:sqlite-jdbc:3.53.2.0",
        "org.postgresql:postgresql:42.7.14",
        "org.mariadb.jdbc:mariadb-java-client:3.5.6",
        "org.apache.iceberg:iceberg-aws-bundle:1.12.0",
    ]
    assert jvm.SPARK_LINE == "4.1"
    assert jvm.POSTGRES_JDBC.file_name == "postgresql-42.7.14.jar"
    assert [jar for jar in jvm.ALL_JARS if jar.jdbc_driver] == [
        jvm.SQLITE_JDBC,
        jvm.POSTGRES_JDBC,
        jvm.MARIADB_JDBC,
    ]


@pytest.mark.parametrize(
    ("environ", "folder"),
    [
        (
            {"INCREMENTAL_ASSETS_JARS": "/opt/jars", "XDG_CACHE_HOME": "/c", "HOME": "/h"},
            "/opt/jars",
        ),
        ({"XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/c/incremental_assets/jars"),
        ({"HOME": "/h"}, "/h/.cache/incremental_assets/jars"),
        ({"INCREMENTAL_ASSETS_JARS": "", "HOME": "/h"}, "/h/.cache/incremental_assets/jars"),
    ],
)
def test_the_jar_folder_is_the_variable_else_the_cache(
    environ: dict[str, str], folder: str
) -> None:
    assert jvm.jar_folder(environ) == Path(folder)
    assert jvm.jar_path(jvm.SQLITE_JDBC, Path(folder)) == Path(folder, "sqlite-jdbc-3.53.2.0.jar")


@pytest.mark.parametrize(
    ("source", "lake", "needed"),
    [
        (PG_SOURCE, {}, [*BASE, jvm.POSTGRES_JDBC]),
        (MYSQL_SOURCE, {}, [*BASE, jvm.MARIADB_JDBC]),
        (MARIADB_SOURCE, {}, [*BASE, jvm.MARIADB_JDBC]),
        (FILES_SOURCE, {}, BASE),
        (FILES_SOURCE, {"format": "parquet"}, BASE),
        (FILES_SOURCE, {"catalog": PG_CATALOG}, [*BASE, jvm.POSTGRES_JDBC]),
        (
            MYSQL_SOURCE,
            {"path": "s3a://bucket/lake", "catalog": PG_CATALOG},
            [*BASE, jvm.POSTGRES_JDBC, jvm.MARIADB_JDBC, jvm.ICEBERG_AWS],
        ),
        (FILES_SOURCE, {"path": "s3://bucket/lake", "format": "parquet"}, [*BASE, jvm.ICEBERG_AWS]),
        (FILES_SOURCE, {"catalog": REST_ON_S3}, [*BASE, jvm.ICEBERG_AWS]),
        ({**PG_SOURCE, "driver": "com.example.Driver"}, {}, BASE),
    ],
)
def test_a_project_gets_the_jars_its_sources_and_lake_need(
    tmp_path: Path,
    jar_folder: Path,
    source: dict[str, Any],
    lake: dict[str, Any],
    needed: list[jvm.Jar],
) -> None:
    project = load_project(_project_file(tmp_path, source, **lake))

    named = jvm.jars_in(project.spark.conf)
    assert [jar for jar, _ in named] == needed
    assert [path for _, path in named] == [jar_folder / jar.file_name for jar in needed]


def test_a_session_gets_the_jars_the_drivers_class_path_and_extensions_beside_the_users(
    jar_folder: Path,
) -> None:
    spec = SparkSpec.model_validate(
        {
            "jars": ["/opt/udfs.jar"],
            "packages": ["com.example:geo:1.0"],
            "conf": {
                "spark.sql.extensions": "com.example.Extensions",
                "spark.driver.extraClassPath": "/opt/agent.jar",
            },
        },
        context={"jars": (jvm.ICEBERG_RUNTIME, jvm.SQLITE_JDBC, jvm.POSTGRES_JDBC)},
    )

    runtime, sqlite, postgres = (
        str(jar_folder / jar.file_name)
        for jar in (jvm.ICEBERG_RUNTIME, jvm.SQLITE_JDBC, jvm.POSTGRES_JDBC)
    )
    assert spec.conf["spark.jars"] == f"/opt/udfs.jar,{runtime},{sqlite},{postgres}"
    assert spec.conf["spark.driver.extraClassPath"] == os.pathsep.join(
        ["/opt/agent.jar", sqlite, postgres]
    )
    assert spec.conf["spark.sql.extensions"] == f"com.example.Extensions,{jvm.ICEBERG_EXTENSIONS}"
    assert spec.conf["spark.jars.packages"] == "com.example:geo:1.0"  # no driver packages
    assert not any(key.startswith("spark.sql.catalog.") for key in spec.conf)
    # What a session was given, given again (as the tests' TEST_SPARK_CONF is), stays the same.
    assert SparkSpec(conf=spec.conf).conf == spec.conf


def test_the_shared_engines_server_starts_with_the_same_jars_and_extensions(
    jar_folder: Path,
) -> None:
    spec = SparkSpec(master="local[2]")

    command = engine_command(engine_settings(spec), 15002)

    settings = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    for key in ("spark.jars", "spark.driver.extraClassPath", "spark.sql.extensions"):
        assert f"{key}={spec.conf[key]}" in settings
    assert command[1:3] == ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]


def test_a_spec_without_a_project_gets_the_jars_every_project_needs(jar_folder: Path) -> None:
    conf = SparkSpec().conf

    assert [jar for jar, _ in jvm.jars_in(conf)] == BASE
    assert conf["spark.sql.extensions"] == jvm.ICEBERG_EXTENSIONS
    assert conf["spark.driver.extraClassPath"] == str(jar_folder / jvm.SQLITE_JDBC.file_name)
    assert SparkSpec(conf=conf).conf == conf  # given again, nothing doubles


def test_a_driver_the_user_brings_in_another_version_replaces_ours(jar_folder: Path) -> None:
    debian = "/usr/share/java/mariadb-java-client.jar"
    context = {"jars": (*BASE, jvm.MARIADB_JDBC, jvm.POSTGRES_JDBC)}
    spec = SparkSpec.model_validate(
        {"jars": [debian], "packages": ["org.postgresql:postgresql:42.2.0"]}, context=context
    )

    assert [jar for jar, _ in jvm.jars_in(spec.conf)] == BASE
    assert spec.conf["spark.jars"].split(",")[0] == debian
    assert spec.conf["spark.jars.packages"] == "org.postgresql:postgresql:42.2.0"


@pytest.mark.parametrize("version", ["4.2.0", "4.0.5", "3.5.6", "4.10.0"])
def test_a_pyspark_off_the_runtimes_line_is_refused_naming_both(version: str) -> None:
    with pytest.raises(EngineError) as refused:
        jvm.check_spark_line(version)

    message = str(refused.value)
    assert f"pyspark {version}" in message and "Spark 4.1" in message
    assert "pip install 'pyspark==4.1.*'" in message


@pytest.mark.parametrize("version", ["4.1.3", "4.1.4", "4.1.0.dev1", None])
def test_a_pyspark_on_the_runtimes_line_is_taken(version: str | None) -> None:
    jvm.check_spark_line(version)  # None: the one installed


def test_a_session_or_the_engine_refuses_to_start_on_another_pyspark(
    tmp_path: Path, jar_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm, "_installed_pyspark", lambda: "4.2.0")
    spec = SparkSpec(master="local[1]")

    with pytest.raises(EngineError, match=r"pyspark 4\.2\.0 .* Spark 4\.1"):
        IncrementalSparkResource.from_spec(spec).spark_session  # noqa: B018
    with pytest.raises(EngineError, match=r"pyspark 4\.2\.0 .* Spark 4\.1"):
        start_engine(spec, tmp_path)
    assert not (engine_folder(tmp_path)).exists()


def test_a_missing_jar_is_named_with_the_command_that_fetches_it(
    tmp_path: Path, jar_folder: Path
) -> None:
    spec = SparkSpec(master="local[1]", conf={"spark.jars": "/opt/udfs.jar"})
    jar_folder.mkdir()
    (jar_folder / jvm.ICEBERG_RUNTIME.file_name).touch()

    with pytest.raises(EngineError) as refused:
        IncrementalSparkResource.from_spec(spec).spark_session  # noqa: B018
    message = str(refused.value)
    assert str(jar_folder / jvm.SQLITE_JDBC.file_name) in message
    assert jvm.SQLITE_JDBC.coordinates in message
    assert "`incremental-assets jars fetch`" in message
    assert jvm.ICEBERG_RUNTIME.file_name not in message
    with pytest.raises(EngineError, match="incremental-assets jars fetch"):
        start_engine(spec, tmp_path)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            "/usr/share/java/nowhere/mariadb-java-client.jar",
            "names /usr/share/java/nowhere/mariadb-java-client.jar, which is not there, and every "
            "class it holds would be missing. Fix: correct the path in the configuration's "
            "`spark: jars:` (or `spark.jars` in `spark: conf:`), or remove the entry; without it, "
            "the project's own org.mariadb.jdbc:mariadb-java-client:3.5.6 is used",
        ),
        ("file:/opt/nowhere/udfs.jar", "names /opt/nowhere/udfs.jar, which is not there"),
        ("/opt/nowhere/*.jar", "names /opt/nowhere/*.jar, which is not there"),
    ],
)
def test_a_jar_the_configuration_names_that_is_not_there_is_named_before_spark_starts(
    tmp_path: Path, jar_folder: Path, entry: str, said: str
) -> None:
    """Spark would start without it, and a run fail later with ClassNotFoundException."""
    jar_folder.mkdir()
    for jar in jvm.ALL_JARS:
        (jar_folder / jar.file_name).touch()
    spec = SparkSpec(master="local[1]", jars=[entry])

    with pytest.raises(EngineError) as refused:
        IncrementalSparkResource.from_spec(spec).spark_session  # noqa: B018
    assert said in str(refused.value)
    with pytest.raises(EngineError, match="which is not there"):
        start_engine(spec, tmp_path)


def test_jars_that_are_there_or_not_this_machines_to_check_are_taken(
    tmp_path: Path, jar_folder: Path
) -> None:
    jar_folder.mkdir()
    for jar in jvm.ALL_JARS:
        (jar_folder / jar.file_name).touch()
    (tmp_path / "udfs.jar").touch()
    given = [str(tmp_path / "udfs.jar"), f"file:{tmp_path}/*.jar", "local:/opt/x.jar"]
    given += ["hdfs://nn/jars/y.jar", "https://repo/z.jar"]

    jvm.check_before_session(SparkSpec(master="local[1]", jars=given).conf)


def test_fetch_downloads_a_jar_through_maven_and_keeps_it(tmp_path: Path) -> None:
    announced: list[jvm.Jar] = []

    (path,) = jvm.fetch([jvm.POSTGRES_JDBC], tmp_path / "jars", announce=announced.append)

    assert path == tmp_path / "jars" / "postgresql-42.7.14.jar"
    with zipfile.ZipFile(path) as jar:
        assert "org/postgresql/Driver.class" in jar.namelist()
    assert announced == [jvm.POSTGRES_JDBC]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no staging left
    # Already there: Maven isn't asked again (here it couldn't be).
    again = jvm.fetch([jvm.POSTGRES_JDBC], tmp_path / "jars", announce=announced.append, mvn="no")
    assert again == (path,) and announced == [jvm.POSTGRES_JDBC]


def test_fetch_says_what_maven_said_when_it_fails(tmp_path: Path) -> None:
    missing = jvm.Jar("org.postgresql", "postgresql", "0.0.0.1")

    with pytest.raises(EngineError) as failed:
        jvm.fetch([missing], tmp_path)

    message = str(failed.value)
    assert "Maven could not fetch org.postgresql:postgresql:0.0.0.1" in message
    assert "postgresql:jar:0.0.0.1" in message  # Maven's own words
    assert "incremental-assets jars fetch" in message
    assert list(tmp_path.iterdir()) == []


def test_fetch_without_maven_says_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"org\.xerial:sqlite-jdbc:3\.53\.2\.0.*install it"):
        jvm.fetch([jvm.SQLITE_JDBC], tmp_path, mvn="no-such-mvn")


def test_the_jars_commands_need_no_instance_and_all_needs_no_configuration(
    tmp_path: Path,
    jar_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("INCREMENTAL_ASSETS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    jar_folder.mkdir()
    for jar in jvm.ALL_JARS:  # already fetched: nothing to download
        (jar_folder / jar.file_name).touch()

    assert cli(["jars", "path"]) == 0
    assert capsys.readouterr().out == f"{jar_folder}\n"
    assert cli(["jars", "fetch", "--all"]) == 0
    assert capsys.readouterr().out == f"5 jars in {jar_folder}\n"
    assert cli(["jars", "fetch"]) == 1  # the project's jars: no configuration here
    assert "No configuration file" in capsys.readouterr().err
    _project_file(tmp_path, FILES_SOURCE)
    (jar_folder / jvm.SQLITE_JDBC.file_name).unlink()
    monkeypatch.setenv("PATH", "")  # the one missing jar would need Maven
    assert cli(["jars", "fetch"]) == 1
    assert "Can't fetch org.xerial:sqlite-jdbc:3.53.2.0" in capsys.readouterr().err
