"""A warm Spark engine on this machine: a Spark Connect server that runs share.

`incremental-assets engine start|stop|status` manage it from the pyspark distribution. It takes
its master, configuration and jars (Iceberg's runtime, the JDBC drivers) from the project's
`spark:` section, and keeps its state (pid, port, log) under
`$DAGSTER_HOME/incremental-assets/engine/`. Runs of a project with
`spark: {engine: shared}` connect to it when it is up, and start a session of their own when it
is not; every run says which in its log and its metadata (`spark`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from incremental_assets.config import SparkSpec
from incremental_assets.errors import EngineError
from incremental_assets.jvm import check_before_session


def _pyspark_home() -> Path:
    """pyspark's folder, found without importing it (the engine's commands start no session)."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is a dependency"
    return Path(spec.origin).parent


SPARK_HOME = _pyspark_home()
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STATE = "engine.json"
_LOG = "engine.log"


@dataclass(frozen=True)
class EngineState:
    pid: int  # the process group of the server
    port: int
    started_at: str
    log: str

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


# The package's folder in DAGSTER_HOME (the engine's state, Spark's log). Not a valid module name:
# named `incremental_assets`, it would be imported as the package (an empty namespace package)
# by Dagster run from inside DAGSTER_HOME, as `make ui` runs it.
HOME_FOLDER = "incremental-assets"


def engine_folder(dagster_home: str | os.PathLike[str]) -> Path:
    return Path(dagster_home) / HOME_FOLDER / "engine"


def running_engine(dagster_home: str | os.PathLike[str] | None) -> EngineState | None:
    """The engine recorded under `dagster_home`, if its process is alive and its port answers."""
    if not dagster_home:
        return None
    path = engine_folder(dagster_home) / _STATE
    if not path.is_file():
        return None
    state = EngineState(**json.loads(path.read_text()))
    return state if _alive(state.pid) and _answers(state.port) else None


def start_engine(
    spark: SparkSpec, dagster_home: str | os.PathLike[str], timeout: float = 300
) -> EngineState:
    """Start the engine (or return the one already up), and wait until it takes sessions."""
    running = running_engine(dagster_home)
    if running is not None:
        return running
    check_before_session(spark.conf)
    folder = engine_folder(dagster_home)
    folder.mkdir(parents=True, exist_ok=True)
    port, log = _free_port(), folder / _LOG
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOG_DIR": str(folder),
        "SPARK_PID_DIR": str(folder),
        "SPARK_CONNECT_MODE": "0",
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            _command(spark, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    state = EngineState(
        process.pid, port, datetime.now(UTC).isoformat(timespec="seconds"), str(log)
    )
    deadline = time.monotonic() + timeout
    while not _answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process.pid)
            tail = log.read_text(errors="replace")[-2000:]
            raise EngineError(
                f"The shared Spark engine did not start (log {log}): {tail.strip()[-800:]} Fix the "
                "`spark:` settings the log names, then run `incremental-assets engine start` again."
            )
        time.sleep(0.5)
    (folder / _STATE).write_text(json.dumps(asdict(state)))
    return state


def stop_engine(dagster_home: str | os.PathLike[str]) -> EngineState | None:
    """Stop the engine recorded under `dagster_home`; returns it, or None if none was running."""
    path = engine_folder(dagster_home) / _STATE
    if not path.is_file():
        return None
    state = EngineState(**json.loads(path.read_text()))
    _stop_group(state.pid)
    path.unlink()
    return state


def _command(spark: SparkSpec, port: int) -> list[str]:
    conf = {
        **spark.conf,
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.app.name": f"{spark.app_name} (shared engine)",
    }
    return connect_server_command(spark.master, conf)


def connect_server_command(master: str, conf: Mapping[str, str]) -> list[str]:
    """The Spark Connect server of the pyspark distribution, in the foreground: what
    `sbin/start-connect-server.sh --wait` runs (pyspark 4.1's wheel ships the server, not the
    script). Run it with SPARK_CONNECT_MODE=0."""
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", CONNECT_SERVER]
    command += ["--master", master]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command


def _stop_group(pid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _alive(pid):
            return


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
