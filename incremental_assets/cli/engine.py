"""`engine start|stop|restart|status`: the shared Spark engine under $DAGSTER_HOME."""

from __future__ import annotations

import argparse

from incremental_assets.cli.context import dagster_home, project_of
from incremental_assets.config import Project
from incremental_assets.engine import (
    RESTART_COMMAND,
    EngineState,
    restart_engine,
    running_engine,
    start_engine,
    stop_engine,
)
from incremental_assets.engine_settings import described, lacks
from incremental_assets.resources import IncrementalSparkResource

# `status`'s exit statuses besides 0 (up, with everything the configuration needs).
DOWN, LACKING = 3, 4


def start(args: argparse.Namespace) -> int:
    project, home = project_of(args), dagster_home()
    if not project.spark.remote and project.spark.engine != "shared":
        print(
            "note: the configuration says spark.engine: local; runs use this engine only "
            "with spark: {engine: shared}"
        )
    report(start_engine(project.spark, home), project)
    return 0


def restart(args: argparse.Namespace) -> int:
    project = project_of(args)
    report(restart_engine(project.spark, dagster_home()), project)
    return 0


def stop(args: argparse.Namespace) -> int:
    engine = stop_engine(dagster_home())
    print("engine stopped" if engine else "no engine was running")
    return 0


def status(args: argparse.Namespace) -> int:
    engine = running_engine(dagster_home())
    if engine is None:
        print("engine down; start it with: incremental-assets engine start")
        return DOWN
    return report(engine, project_of(args))


def report(engine: EngineState, project: Project) -> int:
    """Print where the engine is, and what of `project`'s configuration it lacks: 0, or LACKING."""
    print(
        f"engine up at {engine.url} (pid {engine.pid}, since {engine.started_at}); log {engine.log}"
    )
    wanted = IncrementalSparkResource.from_spec(project.spark).spark_config
    lacking = lacks(engine.settings, wanted)
    if not lacking:
        return 0
    print(
        f"it was started without what the configuration now needs: {described(lacking)}. Runs "
        "that need these restart it when no other run is using it, and are refused when one is. "
        f"Fix: `{RESTART_COMMAND}`"
    )
    return LACKING
