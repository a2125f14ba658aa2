"""The jars every Spark session of the project gets: pinned here, fetched with Maven, given as
paths.

Each jar is named once, below: Iceberg's Spark runtime (built for one Spark line), SQLite's JDBC
driver (the default Iceberg catalog), the sources' JDBC drivers and Iceberg's AWS bundle (S3FileIO).
They are fetched with `mvn dependency:copy` into one folder (`jar_folder`), so Maven's own settings
(mirrors, proxies) apply; Spark's `spark.jars.packages` (Ivy) would go to Maven Central's public
address directly. Sessions get them as plain paths in `spark.jars`, the JDBC drivers also on the
driver's class path (Iceberg's JDBC catalog finds its driver through java.sql.DriverManager),
and Iceberg's SQL extensions (`CALL`, `MERGE INTO`). No Spark catalog is set here: the lake sets
one per lake at run time.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from incremental_assets.errors import EngineError

SPARK_LINE = "4.1"  # the Spark line Iceberg's runtime below is built for
_SCALA = "2.13"
_ICEBERG = "1.12.0"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
JARS_ENV = "INCREMENTAL_ASSETS_JARS"
FETCH_COMMAND = "incremental-assets jars fetch"


@dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    jdbc_driver: bool = False  # also on the driver's class path, for java.sql.DriverManager

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        """The file `mvn dependency:copy` writes."""
        return f"{self.artifact}-{self.version}.jar"


ICEBERG_RUNTIME = Jar(
    "org.apache.iceberg", f"iceberg-spark-runtime-{SPARK_LINE}_{_SCALA}", _ICEBERG
)
SQLITE_JDBC = Jar("org.xerial", "sqlite-jdbc", "3.53.2.0", jdbc_driver=True)
POSTGRES_JDBC = Jar("org.postgresql", "postgresql", "42.7.14", jdbc_driver=True)
MARIADB_JDBC = Jar("org.mariadb.jdbc", "mariadb-java-client", "3.5.6", jdbc_driver=True)
ICEBERG_AWS = Jar("org.apache.iceberg", "iceberg-aws-bundle", _ICEBERG)
ALL_JARS = (ICEBERG_RUNTIME, SQLITE_JDBC, POSTGRES_JDBC, MARIADB_JDBC, ICEBERG_AWS)
# The JDBC driver of each source database, by the source's `kind` (config/sources.py).
SOURCE_DRIVERS = {"postgres": POSTGRES_JDBC, "mysql": MARIADB_JDBC}
_S3 = ("s3://", "s3a://")


def jar_folder(environ: Mapping[str, str] | None = None) -> Path:
    """$INCREMENTAL_ASSETS_JARS, else $XDG_CACHE_HOME/incremental_assets/jars, else ~/.cache/..."""
    env = os.environ if environ is None else environ
    if env.get(JARS_ENV):
        return Path(env[JARS_ENV]).expanduser().absolute()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    return (cache / "incremental_assets" / "jars").absolute()


def jar_path(jar: Jar, folder: Path | None = None) -> Path:
    return (folder or jar_folder()) / jar.file_name


def jars_needed(
    source_kinds: Iterable[str], lake_path: str, catalog: Mapping[str, Any]
) -> tuple[Jar, ...]:
    """The jars a project's sessions need: Iceberg's runtime and SQLite's driver always, the
    sources' drivers, PostgreSQL's for a catalog there, and the AWS bundle for a lake on S3."""
    needed = {ICEBERG_RUNTIME, SQLITE_JDBC}
    needed |= {SOURCE_DRIVERS[kind] for kind in source_kinds if kind in SOURCE_DRIVERS}
    if str(catalog.get("uri", "")).startswith("postgresql"):
        needed.add(POSTGRES_JDBC)
    if lake_path.startswith(_S3) or str(catalog.get("warehouse", "")).startswith(_S3):
        needed.add(ICEBERG_AWS)
    return tuple(jar for jar in ALL_JARS if jar in needed)


def with_jars(
    conf: Mapping[str, Any], jars: Iterable[Jar], folder: Path | None = None
) -> dict[str, str]:
    """`conf` with `jars` as paths in `spark.jars` (after the user's), the JDBC drivers among them
    also in `spark.driver.extraClassPath`, and Iceberg's extensions after the user's in
    `spark.sql.extensions`. A jar the user gives in another version (in `spark.jars` by file name,
    or in `spark.jars.packages` by group and artifact) is left out."""
    result = {key: str(value) for key, value in conf.items()}
    given = listed(result.get("spark.jars"))
    packages = [p.split(":")[:2] for p in listed(result.get("spark.jars.packages"))]
    ours = [
        (jar, str(jar_path(jar, folder)))
        for jar in jars
        if [jar.group, jar.artifact] not in packages
        and not any(_another_version(jar, entry, folder) for entry in given)
    ]
    paths = _joined([*given, *(path for _, path in ours)], ",")
    if paths:
        result["spark.jars"] = paths
    drivers = [path for jar, path in ours if jar.jdbc_driver]
    if drivers:
        class_path = result.get("spark.driver.extraClassPath", "").split(os.pathsep)
        result["spark.driver.extraClassPath"] = _joined([*class_path, *drivers], os.pathsep)
    extensions = [*listed(result.get("spark.sql.extensions")), ICEBERG_EXTENSIONS]
    result["spark.sql.extensions"] = _joined(extensions, ",")
    return result


def _another_version(jar: Jar, entry: str, folder: Path | None) -> bool:
    """Whether a `spark.jars` entry is `jar`'s artifact from somewhere other than our folder."""
    return Path(entry).name.startswith(jar.artifact) and entry != str(jar_path(jar, folder))


def listed(value: object) -> list[str]:
    """A comma-separated Spark setting as a list."""
    return [item for item in str(value or "").split(",") if item]


def _joined(items: Iterable[str], separator: str) -> str:
    return separator.join(dict.fromkeys(item for item in items if item))


def jars_in(conf: Mapping[str, Any]) -> list[tuple[Jar, Path]]:
    """The jars of this module a Spark conf names in `spark.jars`, with their paths."""
    by_name = {jar.file_name: jar for jar in ALL_JARS}
    paths = [Path(entry.removeprefix("file:")) for entry in listed(conf.get("spark.jars"))]
    return [(by_name[path.name], path) for path in paths if path.name in by_name]


def check_spark_line(version: str | None = None) -> None:
    """Refuse a pyspark that Iceberg's runtime here doesn't support (the installed one by
    default)."""
    version = version or _installed_pyspark()
    if ".".join(version.split(".")[:2]) != SPARK_LINE:
        raise EngineError(
            f"pyspark {version} is installed, but Iceberg's Spark runtime this package uses "
            f"({ICEBERG_RUNTIME.coordinates}) runs on Spark {SPARK_LINE} only. Fix: install "
            f"pyspark {SPARK_LINE} (pip install 'pyspark=={SPARK_LINE}.*')."
        )


def _installed_pyspark() -> str:
    from pyspark import __version__

    return str(__version__)


def check_before_session(conf: Mapping[str, Any]) -> None:
    """What a Spark session started from `conf` needs here: pyspark on the supported line, every
    jar of this module the conf names in place, and every other local jar it names there too
    (Spark would start without it, and a run fail later on a class it holds)."""
    check_spark_line()
    missing = [(jar, path) for jar, path in jars_in(conf) if not path.is_file()]
    if missing:
        names = ", ".join(f"{path} ({jar.coordinates})" for jar, path in missing)
        raise EngineError(
            f"Spark can't start without {names}. Fix: run `{FETCH_COMMAND}` (with the same "
            f"${JARS_ENV}, if it is set), which fetches the jars the project needs through "
            f"Maven into {missing[0][1].parent}."
        )
    ours = {str(path) for _, path in jars_in(conf)}
    for entry in listed(conf.get("spark.jars")):
        path = entry.removeprefix("file:")
        if _is_local(entry) and path not in ours and not glob.glob(path):
            raise EngineError(_missing_given_jar(path))


def _is_local(entry: str) -> bool:
    """Whether a `spark.jars` entry is a file of this machine (not `local:`, which is each
    node's, nor a URL)."""
    return entry.startswith("file:") or not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", entry)


def _missing_given_jar(path: str) -> str:
    replaced = next((jar for jar in ALL_JARS if Path(path).name.startswith(jar.artifact)), None)
    instead = (
        f"; without it, the project's own {replaced.coordinates} is used (`{FETCH_COMMAND}` "
        "fetches it)"
        if replaced
        else ""
    )
    return (
        f"Spark can't start: `spark.jars` names {path}, which is not there, and every class it "
        f"holds would be missing. Fix: correct the path in the configuration's `spark: jars:` "
        f"(or `spark.jars` in `spark: conf:`), or remove the entry{instead}."
    )


def fetch(
    jars: Iterable[Jar],
    folder: Path | None = None,
    announce: Callable[[Jar], None] | None = None,
    mvn: str = "mvn",
) -> tuple[Path, ...]:
    """`jars` in `folder` (the jar folder by default), each downloaded by `mvn dependency:copy`
    unless it is already there; `announce` is told of each download before it starts."""
    folder = folder or jar_folder()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for jar in jars:
        path = jar_path(jar, folder)
        if not path.is_file():
            if announce is not None:
                announce(jar)
            _download(jar, path, mvn)
        paths.append(path)
    return tuple(paths)


def _download(jar: Jar, path: Path, mvn: str) -> None:
    """One jar by Maven into a folder of its own beside `path`, then renamed into place, so that
    two fetches at once never leave half a jar."""
    executable = shutil.which(mvn)
    if executable is None:
        raise EngineError(
            f"Can't fetch {jar.coordinates}: Maven (`{mvn}`) is not on PATH. Fix: install it "
            f"(apt-get install maven), or put the jar at {path} yourself."
        )
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=path.parent) as staging:
        command = [executable, "-B", "-q", "dependency:copy", f"-Dartifact={jar.coordinates}"]
        command.append(f"-DoutputDirectory={staging}")
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        fetched = Path(staging) / jar.file_name
        if done.returncode != 0 or not fetched.is_file():
            said = _maven_said(done.stdout + done.stderr)
            raise EngineError(
                f"Maven could not fetch {jar.coordinates} (exit status {done.returncode}):\n"
                f"{said}\nFix: let Maven reach the artifact (its repositories, mirrors and "
                f"proxies are set in ~/.m2/settings.xml), then run `{FETCH_COMMAND}` again."
            )
        os.replace(fetched, path)


def _maven_said(output: str, last: int = 4) -> str:
    """Maven's error: its first line and its last ones, before the boilerplate that follows."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in output.splitlines()]
    lines = [line for line in lines if line.strip() not in ("", "[ERROR]")]
    end = next((i for i, line in enumerate(lines) if "-> [Help" in line), len(lines))
    return "\n".join(dict.fromkeys([*lines[:1], *lines[:end][-last:]]))
