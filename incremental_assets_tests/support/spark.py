"""Spark for the tests: the conf of the suite's sessions, and the engines started from the pyspark
distribution for runs in subprocesses: a Spark Connect server and a standalone cluster (a master
and two workers) on localhost."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark

from incremental_assets import jvm
from incremental_assets.engine import connect_server_command
from incremental_assets_tests.support.postgres import free_port

SPARK_HOME = Path(pyspark.__file__).parent

# The jars of every project (Iceberg's runtime, SQLite's driver) and both sources' drivers, as
# paths in the jar folder (`make install` fetches them), with Iceberg's SQL extensions.
# Iceberg's AWS bundle too: the object-store tests' lake is on moto's S3, in the suite's session.
TEST_JVM_CONF = jvm.with_jars({}, jvm.ALL_JARS)
# A small Spark; what a test project's `spark.conf` holds (its jars come from its sources).
TEST_SPARK_SETTINGS = {
    # Every test JVM has the suite's class path, so that each can share the archive's classes
    # (`class_archive`): a project's own drivers are among these.
    "spark.driver.extraClassPath": TEST_JVM_CONF["spark.driver.extraClassPath"],
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    # The tests' rows are few: compiling a query's stages into Java (janino, then a JIT held to
    # C1 here) costs them more than it returns. Spark runs the same plans, operator by operator;
    # the benchmarks keep Spark's default.
    "spark.sql.codegen.wholeStage": "false",
}
TEST_SPARK_CONF = {**TEST_JVM_CONF, **TEST_SPARK_SETTINGS}

# The test JVMs live seconds to minutes and run tiny jobs: on two cores, C2's compiler threads
# cost them more than they return, and the serial collector is enough for a 1 GB heap. Every JVM
# spark-submit starts (in-process sessions, subprocess runs, the Connect server) takes these
# from SPARK_SUBMIT_OPTS; the users' JVMs are left alone. About a third off the suite's time.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# A session's start, made once per machine and Spark (`class_archive`): the JDK's class data
# sharing maps the classes a session loads from an archive instead of loading each from its jar,
# a third or more off every test JVM's start. A JVM whose class path differs from the archive's
# (a project with other drivers) starts as before; its notice of that is turned off.
_WARM_UP = """
import sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master("local[2]")
for key, value in dict(a.split("=", 1) for a in sys.argv[2:]).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
rows = spark.range(1000).selectExpr("id", "cast(id as string) as s", "current_timestamp() as t")
rows.write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).groupBy("s").count().collect()
spark.stop()
"""


def class_archive(python: str, folder: Path) -> Path | None:
    """The class data sharing archive of a test session's start (made now if missing), or None
    if it can't be made here."""
    java = shutil.which("java")
    if java is None:
        return None
    jdk = Path(java).resolve()  # another JDK can't use the archive: make one for it
    key = json.dumps(
        [
            str(jdk),
            jdk.stat().st_mtime,
            pyspark.__version__,
            TEST_JVM_OPTIONS,
            sorted(TEST_SPARK_CONF.items()),
        ]
    )
    archive = folder / f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"
    if archive.is_file():
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as directory:
        made = Path(directory) / archive.name
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{TEST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={made}",
        }
        conf = [f"{key}={value}" for key, value in TEST_SPARK_CONF.items()]
        try:
            subprocess.run(
                [python, "-c", _WARM_UP, str(Path(directory) / "rows"), *conf],
                env=env,
                capture_output=True,
                timeout=600,
                check=True,
            )
        except (subprocess.SubprocessError, OSError):
            return None
        if not made.is_file():
            return None
        os.replace(made, archive)
    return archive


def jvm_options(archive: Path | None) -> str:
    """The test JVMs' options, sharing `archive`'s classes if there is one."""
    if archive is None:
        return TEST_JVM_OPTIONS
    return f"{TEST_JVM_OPTIONS} -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _wait_for_port(
    port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark process ended:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listened on port {port}:\n{log.read_text()[-3000:]}")


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _env(logs: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOG_DIR": str(logs),
        "SPARK_PID_DIR": str(logs),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@contextmanager
def connect_server() -> Iterator[str]:
    """The shared engine's Spark Connect server, with the tests' jars (`TEST_JVM_CONF`), on a free
    port."""
    with tempfile.TemporaryDirectory(prefix="ia-connect-") as directory:
        port, logs = free_port(), Path(directory)
        conf = {
            **TEST_JVM_CONF,
            "spark.connect.grpc.binding.port": str(port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.codegen.wholeStage": "false",
            "spark.driver.memory": "1g",
        }
        command = connect_server_command("local[2]", conf)
        process = _start(command, logs / "server.log", {**_env(logs), "SPARK_CONNECT_MODE": "0"})
        try:
            _wait_for_port(port, process, logs / "server.log")
            yield f"sc://127.0.0.1:{port}"
        finally:
            _stop(process)


@contextmanager
def standalone_cluster(workers: int = 2) -> Iterator[tuple[str, str]]:
    """A master and `workers` workers from `spark-class`; yields the master URL and its web UI."""
    with tempfile.TemporaryDirectory(prefix="ia-cluster-") as directory:
        logs, port, ui = Path(directory), free_port(), free_port()
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        master = _start(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            logs / "master.log",
            _env(logs),
        )
        url = f"spark://127.0.0.1:{port}"
        started = [master]
        try:
            _wait_for_port(port, master, logs / "master.log")
            for i in range(workers):
                started.append(
                    _start(
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            "1",
                            "--memory",
                            "1g",
                            "--webui-port",
                            str(free_port()),
                            "--work-dir",
                            str(logs / f"work{i}"),
                            url,
                        ],
                        logs / f"worker{i}.log",
                        _env(logs),
                    )
                )
            web = f"http://127.0.0.1:{ui}"
            deadline = time.monotonic() + 120
            while len(master_state(web).get("workers", [])) < workers:
                if time.monotonic() > deadline:
                    raise TimeoutError("the workers did not register with the master")
                time.sleep(1)
            yield url, web
        finally:
            _stop(*reversed(started))


def master_state(web: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{web}/json/", timeout=5) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except OSError:
        return {}
