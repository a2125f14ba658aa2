"""A warm Spark engine on this machine: a Spark Connect server that runs share.

`incremental-assets engine start|stop|restart|status` manage it from the pyspark distribution. It
takes its master, configuration and jars (Iceberg's runtime, the JDBC drivers) from the project's
`spark:` section, and keeps its state (pid, port, log, the settings it started with) under
`$DAGSTER_HOME/incremental-assets/engine/`. Runs of a project with `spark: {engine: shared}`
connect to it when it is up, and start a session of their own when it is not; every run says which
in its log and its metadata (`spark`).

A server takes its jars, master and static settings only when it starts. A run that needs one the
engine lacks (a PostgreSQL table added since, say) restarts it with them when no other run uses
it, and is refused, naming what is missing and the command that fixes it, when one does. Who uses
it is known by file locks, not by asking the server: a run holds a shared `flock` on `users.lock`
while its session lives, and the kernel drops it when the process ends however it ends, so a
crashed run leaves nothing behind. The server can't tell: its sessions outlive their clients (a
run that dies never releases its session), and a run between two Spark calls has no operation on
it. Deciding, restarting and starting are serialized by an exclusive lock on `gate.lock`.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from incremental_assets.config import SparkSpec
from incremental_assets.engine_settings import Lack, described, lacks, with_needed
from incremental_assets.errors import EngineError
from incremental_assets.jvm import check_before_session


def _pyspark_home() -> Path:
    """pyspark's folder, found without importing it (the engine's commands start no session)."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is a dependency"
    return Path(spec.origin).parent


SPARK_HOME = _pyspark_home()
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
RESTART_COMMAND = "incremental-assets engine restart"
START_TIMEOUT = 300.0  # seconds a starting server gets to answer
_STATE = "engine.json"
_LOG = "engine.log"
_GATE = "gate.lock"
_USERS = "users.lock"


@dataclass(frozen=True)
class EngineState:
    pid: int  # the process group of the server
    port: int
    started_at: str
    log: str
    # spark.master and the configuration it started with (none: recorded before they were)
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def refusal(engine: EngineState, lacking: tuple[Lack, ...]) -> str:
    return (
        f"The shared Spark engine at {engine.url} (pid {engine.pid}, started {engine.started_at}) "
        f"was started without what this run's configuration needs: {described(lacking)}. It "
        "takes these only when it starts, and other runs are using it now, so it was not "
        f"restarted. Fix: when they have finished, run `{RESTART_COMMAND}` (it starts the engine "
        "with the current configuration), then run this again."
    )


# The package's folder in DAGSTER_HOME (the engine's state, Spark's log). Not a valid module name:
# named `incremental_assets`, it would be imported as the package (an empty namespace package)
# by Dagster run from inside DAGSTER_HOME, as `make ui` runs it.
HOME_FOLDER = "incremental-assets"


def engine_folder(dagster_home: str | os.PathLike[str]) -> Path:
    return Path(dagster_home) / HOME_FOLDER / "engine"


def running_engine(dagster_home: str | os.PathLike[str] | None) -> EngineState | None:
    """The engine recorded under `dagster_home`, if its process is alive and its port answers."""
    state = _recorded(engine_folder(dagster_home)) if dagster_home else None
    return state if state and _alive(state.pid) and _answers(state.port) else None


@dataclass
class EngineLease:
    """The engine, held in use by this process until `release` (or the process's end)."""

    engine: EngineState
    restarted_for: tuple[Lack, ...]  # what it lacked, when this process restarted it
    users_lock: IO[str]

    def release(self) -> None:
        self.users_lock.close()


def lease_engine(
    dagster_home: str | os.PathLike[str] | None, wanted: Mapping[str, Any]
) -> EngineLease | None:
    """The running engine, held for a session of configuration `wanted`: restarted first with
    what it lacks when no other run uses it; refused (EngineError) when one does. None when no
    engine is up."""
    if not dagster_home or _recorded(engine_folder(dagster_home)) is None:
        return None
    folder = engine_folder(dagster_home)
    with _gate(folder):
        engine = running_engine(dagster_home)
        if engine is None:
            return None
        users = (folder / _USERS).open("a")
        try:
            lacking = lacks(engine.settings, wanted)
            if lacking and not _try_lock(users, fcntl.LOCK_EX):
                raise EngineError(refusal(engine, lacking))
            if lacking:
                engine = _replace(folder, with_needed(engine.settings, wanted), START_TIMEOUT)
            # Still behind the gate: no one takes the engine between the two locks.
            fcntl.flock(users, fcntl.LOCK_SH)
        except BaseException:
            users.close()
            raise
        return EngineLease(engine, lacking, users)


def start_engine(
    spark: SparkSpec, dagster_home: str | os.PathLike[str], timeout: float = START_TIMEOUT
) -> EngineState:
    """Start the engine (or return the one already up), and wait until it takes sessions."""
    running = running_engine(dagster_home)
    if running is not None:
        return running
    check_before_session(spark.conf)
    folder = engine_folder(dagster_home)
    with _gate(folder):
        return running_engine(dagster_home) or _start(engine_settings(spark), folder, timeout)


def restart_engine(
    spark: SparkSpec, dagster_home: str | os.PathLike[str], timeout: float = START_TIMEOUT
) -> EngineState:
    """Stop the engine and start it with the current configuration, unless runs are using it."""
    folder = engine_folder(dagster_home)
    with _gate(folder), (folder / _USERS).open("a") as users:
        if not _try_lock(users, fcntl.LOCK_EX):
            raise EngineError(
                f"Runs are using the shared Spark engine under {dagster_home} now, and a restart "
                f"would fail them. Fix: run `{RESTART_COMMAND}` again when they have finished "
                "(or `incremental-assets engine stop` to end them with it)."
            )
        return _replace(folder, engine_settings(spark), timeout)


def stop_engine(dagster_home: str | os.PathLike[str]) -> EngineState | None:
    """Stop the engine recorded under `dagster_home`; returns it, or None if none was running."""
    return _stop_recorded(engine_folder(dagster_home))


def begin_stopping_engine(dagster_home: str | os.PathLike[str]) -> None:
    """Ask the engine recorded under `dagster_home` to stop (SIGTERM), without waiting for it."""
    state = _recorded(engine_folder(dagster_home))
    if state is not None:
        with suppress(ProcessLookupError):
            os.killpg(state.pid, signal.SIGTERM)


def engine_settings(spark: SparkSpec) -> dict[str, str]:
    """What the engine of a `spark:` section starts with: its master, name and configuration."""
    return {
        "spark.master": spark.master,
        **spark.conf,
        "spark.app.name": f"{spark.app_name} (shared engine)",
    }


def _replace(folder: Path, settings: Mapping[str, str], timeout: float) -> EngineState:
    """The recorded engine stopped, and one started with `settings` (checked first)."""
    check_before_session(settings)
    _stop_recorded(folder)
    return _start(settings, folder, timeout)


def _start(settings: Mapping[str, str], folder: Path, timeout: float) -> EngineState:
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
            _command(settings, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    started = datetime.now(UTC).isoformat(timespec="seconds")
    state = EngineState(process.pid, port, started, str(log), dict(settings))
    try:
        _wait_until_it_answers(process, port, log, timeout)
    except BaseException:
        # Interrupted (Ctrl-C during `make ui`'s start) or failed: no server is left behind.
        _stop_group(process.pid)
        raise
    (folder / _STATE).write_text(json.dumps(asdict(state)))
    return state


def _wait_until_it_answers(
    process: subprocess.Popen[bytes], port: int, log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not _answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            raise EngineError(
                f"The shared Spark engine did not start (log {log}): {tail.strip()[-800:]} Fix the "
                "`spark:` settings the log names, then run `incremental-assets engine start` again."
            )
        time.sleep(0.5)


def _recorded(folder: Path) -> EngineState | None:
    path = folder / _STATE
    return EngineState(**json.loads(path.read_text())) if path.is_file() else None


def _stop_recorded(folder: Path) -> EngineState | None:
    state = _recorded(folder)
    if state is None:
        return None
    _stop_group(state.pid)
    (folder / _STATE).unlink()
    return state


@contextmanager
def _gate(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / _GATE).open("a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        yield


def _try_lock(file: IO[str], kind: int) -> bool:
    try:
        fcntl.flock(file, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _command(settings: Mapping[str, str], port: int) -> list[str]:
    conf = {
        **{key: value for key, value in settings.items() if key != "spark.master"},
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
    }
    return connect_server_command(settings["spark.master"], conf)


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
    # A server this process started (`make ui`'s) is its child: reaped once it ended, it is gone.
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
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
