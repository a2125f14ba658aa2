"""`engine start|stop|status`: the shared Spark engine under $DAGSTER_HOME."""

from __future__ import annotations

import argparse

from incremental_assets.cli.context import dagster_home, project_of
from incremental_assets.engine import running_engine, start_engine, stop_engine


def start(args: argparse.Namespace) -> int:
    project, home = project_of(args), dagster_home()
    if not project.spark.remote and project.spark.engine != "shared":
        print(
            "note: the configuration says spark.engine: local; runs use this engine only "
            "with spark: {engine: shared}"
        )
    engine = start_engine(project.spark, home)
    print(
        f"engine up at {engine.url} (pid {engine.pid}, since {engine.started_at}); log {engine.log}"
    )
    return 0


def stop(args: argparse.Namespace) -> int:
    engine = stop_engine(dagster_home())
    print("engine stopped" if engine else "no engine was running")
    return 0


def status(args: argparse.Namespace) -> int:
    engine = running_engine(dagster_home())
    if engine is None:
        print("engine down; start it with: incremental-assets engine start")
        return 3
    print(
        f"engine up at {engine.url} (pid {engine.pid}, since {engine.started_at}); log {engine.log}"
    )
    return 0
