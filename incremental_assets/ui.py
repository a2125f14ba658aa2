"""`make ui`: the Dagster UI (`dagster dev`) beside the shared engine, both ended by one signal.

    DAGSTER_HOME=... python -m incremental_assets.ui --config FILE --workspace FILE [-- DEV_ARGS]

It starts the engine, then `dagster dev` inside DAGSTER_HOME (so the dagster.yaml there is the
instance's own) in a process group of its own, which holds its webserver, daemon, code servers
and the runs they launch: none of them starts a group of its own. One SIGINT (Ctrl-C) or SIGTERM
to this process sends SIGINT to that group, Dagster's own way to stop, and SIGTERM to the engine
(the server has a group of its own too), kills what is left of Dagster's group once `dagster dev`
has ended or after a grace period, then waits for the engine to be gone (killing it after 30 s).
A shell line `dagster dev; incremental-assets engine stop` could not do this: make, interrupted,
never ran the second command, and left the engine's JVM behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from types import FrameType

from incremental_assets.cli.context import dagster_home
from incremental_assets.cli.engine import report
from incremental_assets.config import load_config
from incremental_assets.engine import begin_stopping_engine, start_engine, stop_engine
from incremental_assets.errors import IncrementalAssetsError

# What `dagster dev` gets to end its webserver and daemon before its group is killed (its code
# servers take longer, and nothing of theirs is lost); the engine stops meanwhile.
GRACE_SECONDS = 4.0
# Dagster's warning that `dagster dev` itself is superseded by `dg dev`.
_QUIET = "ignore::Warning:click.core"


class _Stop(Exception):
    """SIGINT or SIGTERM arrived."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m incremental_assets.ui", description=__doc__)
    parser.add_argument("--config", required=True, help="the project's configuration file")
    parser.add_argument("--workspace", required=True, help="the workspace.yaml dagster dev loads")
    parser.add_argument("dev_args", nargs="*", help="more arguments for dagster dev (after --)")
    args = parser.parse_args(argv)
    config, workspace = (str(Path(path).absolute()) for path in (args.config, args.workspace))
    try:
        return _serve(dagster_home(), config, workspace, args.dev_args)
    except IncrementalAssetsError as exc:
        print(f"make ui: {exc}", file=sys.stderr)
        return 1


def _serve(home: str, config: str, workspace: str, dev_args: Sequence[str]) -> int:
    """The engine and `dagster dev` until a signal, or until `dagster dev` ends; then neither."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_stop)
    try:
        project = load_config(config).project
        report(start_engine(project.spark, home), project)
        dev = _start_dev(home, config, workspace, dev_args)
        try:
            return dev.wait()
        except _Stop:
            return 0
        finally:
            _ignore_signals()  # a second Ctrl-C must not cut the stop short
            # The JVM stops while Dagster's processes do; it is waited for (or killed) last.
            begin_stopping_engine(home)
            _end_group(dev, GRACE_SECONDS)
    except _Stop:
        return 0
    finally:
        _ignore_signals()
        stop_engine(home)


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _start_dev(
    home: str, config: str, workspace: str, dev_args: Sequence[str]
) -> subprocess.Popen[bytes]:
    dagster = str(Path(sys.executable).with_name("dagster"))
    env = {**os.environ, "INCREMENTAL_ASSETS_CONFIG": config, "PYTHONWARNINGS": _QUIET}
    return subprocess.Popen(
        [dagster, "dev", "-w", workspace, *dev_args],
        cwd=home,
        env=env,
        start_new_session=True,
    )


def _end_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGINT to `process`'s group; SIGKILL to what is left of it once `process` (`dagster dev`,
    which waits for its webserver and daemon) has ended, or after `grace` seconds."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


if __name__ == "__main__":
    sys.exit(main())
