"""What every command starts from: the configuration, the tables named, the instance, the lock."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
from collections.abc import Sequence
from contextlib import AbstractContextManager

import dagster as dg

from incremental_assets.config import Project, TableSpec, load_project
from incremental_assets.errors import CursorError, InstanceError
from incremental_assets.lake import open_lake
from incremental_assets.translator import translator_for


def project_of(args: argparse.Namespace) -> Project:
    return load_project(args.config)


def tables_of(project: Project, names: Sequence[str]) -> list[TableSpec]:
    try:
        return [project.table(name) for name in names] if names else list(project.tables)
    except KeyError as exc:
        raise CursorError(str(exc.args[0])) from None


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
