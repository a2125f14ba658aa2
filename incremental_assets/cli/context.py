"""What every command starts from: the configuration, the tables named, the instance, the lock."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager

import dagster as dg

from incremental_assets.config import Project, TableSpec, load_config
from incremental_assets.errors import ConfigError, CursorError, InstanceError
from incremental_assets.lake import open_lake
from incremental_assets.translator import translator_for


def project_of(args: argparse.Namespace) -> Project:
    """The configuration with its valid tables (each invalid one named on stderr)."""
    return project_and_tables(args, ())[0]


def project_and_tables(
    args: argparse.Namespace, names: Sequence[str]
) -> tuple[Project, list[TableSpec]]:
    """The configuration with its valid tables, as the Dagster definitions load it, and the
    tables `names` names (all of them when it names none).

    A named table whose settings are wrong is refused with its configuration error; every other
    one is left out, and named on stderr with that error.
    """
    loaded = load_config(args.config)
    named = [invalid for invalid in loaded.invalid_tables if invalid.table.name in names]
    if named:
        problems = [problem for invalid in named for problem in invalid.problems]
        raise ConfigError(problems=problems, file=loaded.project.path)
    for invalid in loaded.invalid_tables:
        print(f"incremental-assets: {invalid.left_out}", file=sys.stderr)
    project = loaded.project
    try:
        tables = [project.table(name) for name in names] if names else list(project.tables)
    except KeyError as exc:
        raise CursorError(str(exc.args[0])) from None
    return project, tables


def dagster_home() -> str:
    """$DAGSTER_HOME, which must name a directory by its absolute path."""
    home = os.environ.get("DAGSTER_HOME", "")
    if not home:
        raise InstanceError(
            "DAGSTER_HOME is not set, so there is no instance holding the cursors. Point it at the "
            "directory Dagster uses (for example: export DAGSTER_HOME=$PWD/.dagster_home)."
        )
    if not os.path.isabs(home):
        raise InstanceError(
            f"DAGSTER_HOME is '{home}', a relative path, and Dagster needs an absolute one. Fix: "
            f"export DAGSTER_HOME={os.path.abspath(home)}"
        )
    if not os.path.isdir(home):
        raise InstanceError(
            f"DAGSTER_HOME is {home}, which is not a directory. Point it at the directory that "
            f"holds your instance, or create a new one: mkdir -p {home}"
        )
    return home


def open_instance() -> dg.DagsterInstance:
    home = dagster_home()
    try:
        return dg.DagsterInstance.get()
    except dg.DagsterError as exc:
        cause = " ".join(str(exc).split())
        raise InstanceError(
            f"The Dagster instance in DAGSTER_HOME={home} can't be opened: {cause} Fix "
            f"{os.path.join(home, 'dagster.yaml')}."
        ) from None


def asset_key(project: Project, table: TableSpec) -> dg.AssetKey:
    return translator_for(project).asset_key(table)


def actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def table_lock(project: Project, table: TableSpec, action: str) -> AbstractContextManager[None]:
    """The table's lake lock: a cursor moved by hand must not race a run recording its own."""
    lake = open_lake(project.lake, table.name)
    return lake.lock(table.name, f"{action} by {actor()}", project.lake.lock_timeout)
