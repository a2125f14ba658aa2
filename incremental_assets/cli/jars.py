"""`jars fetch [--all]` and `jars path`: the jars Spark sessions get, fetched through Maven."""

from __future__ import annotations

import argparse

from incremental_assets import jvm
from incremental_assets.cli.context import project_of


def fetch(args: argparse.Namespace) -> int:
    """The configured project's jars (every one with --all) into the jar folder."""
    jars = (
        jvm.ALL_JARS if args.all else [jar for jar, _ in jvm.jars_in(project_of(args).spark.conf)]
    )
    paths = jvm.fetch(jars, announce=lambda jar: print(f"fetching {jar.coordinates}", flush=True))
    print(f"{len(paths)} jars in {jvm.jar_folder()}")
    return 0


def path(args: argparse.Namespace) -> int:
    print(jvm.jar_folder())
    return 0
