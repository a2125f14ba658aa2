"""A test's loads in one object (the `loads` fixture): its project, Dagster instance and Spark
resource, so a test says what it configures and runs, not how each run is wired.

`configure` writes the project with `ProjectBuilder` (one source `shop`, one table) and remembers
it; `run`, `lake`, `rows`, `files` and `metadata` then default to that project's one table. A
table's settings start from a name, from one of the presets below, or from a test file's own
defaults; keywords override them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import dagster as dg
import pyarrow as pa

from incremental_assets.config import Project
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.project import (
    ProjectBuilder,
    Run,
    SourceHandle,
    lake_files,
    latest_metadata,
    materialize,
    read_lake,
    rows_by,
    write_project,
)

# Table settings several test files start from: `loads.configure(pg, ORDERS_MERGE, ...)`.
ORDERS_MERGE: Final[Mapping[str, Any]] = {
    "name": "orders",
    "mode": "merge",
    "cursor": "updated_at",
    "primary_key": ["id"],
}
ORDERS_APPEND: Final[Mapping[str, Any]] = {**ORDERS_MERGE, "mode": "append"}
ITEMS_MERGE: Final[Mapping[str, Any]] = {
    "name": "items",
    "mode": "merge",
    "cursor": "at",
    "primary_key": ["id"],
}


class Loads:
    """The test's directory (through its `ProjectBuilder`), Dagster instance and Spark resource."""

    def __init__(
        self,
        builder: ProjectBuilder,
        instance: dg.DagsterInstance,
        spark_resource: IncrementalSparkResource,
    ) -> None:
        self._builder = builder
        self._instance = instance
        self._spark_resource = spark_resource
        self._project: Project | None = None

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def spark_resource(self) -> IncrementalSparkResource:
        return self._spark_resource

    @property
    def project(self) -> Project:
        """The project written last."""
        if self._project is None:
            raise AssertionError("no project yet: call loads.configure(...) first")
        return self._project

    @property
    def lake_dir(self) -> Path:
        """The lake of the project written last."""
        return Path(self.project.lake.path)

    def config(
        self,
        db: SourceHandle,
        table: str | Mapping[str, Any],
        /,
        *,
        source: Mapping[str, Any] | None = None,
        lake: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """The project `configure` would write, as a mapping to change before `write`."""
        return self._builder.config(db, table, source=source, lake=lake, **settings)

    def configure(
        self,
        db: SourceHandle,
        table: str | Mapping[str, Any],
        /,
        *,
        source: Mapping[str, Any] | None = None,
        lake: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> Project:
        """Writes source `shop` on `db` and one table (see `ProjectBuilder`); runs use it next."""
        return self.write(self.config(db, table, source=source, lake=lake, **settings))

    def write(self, config: Mapping[str, Any]) -> Project:
        """Writes the project as given; runs use it next."""
        self._project = write_project(self._builder.directory, config)
        return self._project

    def run(
        self,
        table: str | None = None,
        *,
        full_refresh: bool = False,
        project: Project | None = None,
    ) -> Run:
        """Materializes `table` (the project's one table if not named) of `project` (the one
        written last if not given)."""
        project = project or self.project
        name = table or _only_table(project)
        return materialize(project, name, self._instance, self._spark_resource, full_refresh)

    def lake(self, table: str | None = None) -> pa.Table:
        """The table in the lake, as its readers read it."""
        return read_lake(self.lake_dir, table or _only_table(self.project))

    def rows(self, columns: list[str], table: str | None = None) -> list[tuple[Any, ...]]:
        """The lake's rows, those columns only, sorted."""
        return rows_by(self.lake(table), columns)

    def files(self, table: str | None = None) -> list[str]:
        """The names of the table's data files in the lake."""
        return lake_files(self.lake_dir, table or _only_table(self.project))

    def metadata(self, table: str | None = None) -> dict[str, Any]:
        """The metadata of the table's latest materialization; {} if there is none."""
        return latest_metadata(self._instance, table or _only_table(self.project))


def _only_table(project: Project) -> str:
    if len(project.tables) != 1:
        names = ", ".join(t.name for t in project.tables)
        raise AssertionError(f"{project.path} has tables {names}: name the one meant")
    return project.tables[0].name
