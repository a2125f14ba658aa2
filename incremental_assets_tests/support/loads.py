"""A test's loads in one object (the `loads` fixture): its project, Dagster instance and Spark
resource, so a test says what it configures and runs, not how each run is wired.

`configure` writes the project with `ProjectBuilder` (one source `shop`, one table) and remembers
it; `run`, `execute`, `lake`, `rows`, `files`, `iceberg_table` and `metadata` then default to that
project's one table. `cli_config` and `paused_run` run the same project in a subprocess, on the
same instance (`home`). A table's settings start from a name, from one of the presets below, or
from a test file's own defaults; keywords override them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import dagster as dg
import pyarrow as pa

from incremental_assets.config import Project
from incremental_assets.factory import build_table_asset
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.maintenance import Policy, maintain
from incremental_assets.lake.iceberg.table import now
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.support.cli import paused_run, write_cli_config
from incremental_assets_tests.support.project import (
    ProjectBuilder,
    Run,
    SourceHandle,
    iceberg_table,
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
        self._written: tuple[Project, Mapping[str, Any]] | None = None

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def home(self) -> Path:
        """The instance's directory: the DAGSTER_HOME of a subprocess or a CLI command that
        records in the same instance."""
        return Path(str(self._instance.root_directory))

    @property
    def spark_resource(self) -> IncrementalSparkResource:
        return self._spark_resource

    @property
    def project(self) -> Project:
        """The project written last."""
        return self._last()[0]

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
        project = write_project(self._builder.directory, config)
        self._written = (project, config)
        return project

    def run(
        self,
        table: str | None = None,
        *,
        full_refresh: bool = False,
        project: Project | None = None,
        instance: dg.DagsterInstance | None = None,
    ) -> Run:
        """Materializes `table` (the project's one table if not named) of `project` (the one
        written last if not given), recorded in `instance` (the test's if not given)."""
        project = project or self.project
        name = table or _only_table(project)
        return materialize(
            project, name, instance or self._instance, self._spark_resource, full_refresh
        )

    def execute(
        self,
        config: Mapping[str, Any],
        table: str | None = None,
        *,
        raise_on_error: bool = True,
    ) -> dg.ExecuteInProcessResult:
        """A run of `table` with this asset config (`full_refresh`, `backfill_from`, ...), as the
        launchpad starts it: Dagster's own result, with its check evaluations and events."""
        project = self.project
        spec = project.table(table or _only_table(project))
        translator = IncrementalAssetsTranslator(project.lake)
        return dg.materialize(
            [build_table_asset(project, spec, translator)],
            instance=self._instance,
            resources={"spark": self._spark_resource},
            run_config={"ops": {translator.op_name(spec): {"config": dict(config)}}},
            raise_on_error=raise_on_error,
        )

    def cli_config(self, remote: str | None = None) -> Path:
        """The project written last, for runs in a subprocess (`write_cli_config`: a small local
        Spark, or the Spark Connect server at `remote`), written in `cli/` beside it: the same
        sources, tables and lake."""
        _, config = self._last()
        return write_cli_config(
            self._builder.directory / "cli",
            dict(config["sources"]),
            list(config["tables"]),
            remote,
            **config["lake"],
        )

    def paused_run(
        self, point: str, *, remote: str | None = None, full_refresh: bool = False
    ) -> tuple[subprocess.Popen[str], Path]:
        """`dagster asset materialize --select orders` of the project written last, in a
        subprocess on this instance, held at the pause point `point` (see `paused_run`): the
        process, and the marker file whose removal lets it go on."""
        return paused_run(
            self._builder.directory,
            self.cli_config(remote),
            self.home,
            point,
            full_refresh=full_refresh,
        )

    def compact(self, table: str | None = None) -> str:
        """The Iceberg table's compaction, as maintenance runs it, every small file packed
        together: what it did."""
        lake = open_lake(self.project.lake, table or _only_table(self.project))
        assert isinstance(lake, IcebergLake)
        state = lake.state()
        assert state is not None
        policy = Policy(keep_snapshots=100, keep_snapshots_for=timedelta(days=1), small_files=2)
        spark = lake.session(self._spark_resource.spark_session)
        return maintain(spark, lake.target(), state, ["compact"], policy, now()).describe()

    def lake(self, table: str | None = None) -> pa.Table:
        """The table in the lake, as its readers read it."""
        return read_lake(self.lake_dir, table or _only_table(self.project))

    def rows(self, columns: list[str], table: str | None = None) -> list[tuple[Any, ...]]:
        """The lake's rows, those columns only, sorted."""
        return rows_by(self.lake(table), columns)

    def iceberg_table(self, table: str | None = None) -> Any:
        """The PyIceberg table in the lake's default catalog (SQLite in the lake)."""
        return iceberg_table(self.lake_dir, table or _only_table(self.project))

    def files(self, table: str | None = None) -> list[str]:
        """The names of the table's data files in the lake."""
        return lake_files(self.lake_dir, table or _only_table(self.project))

    def metadata(self, table: str | None = None) -> dict[str, Any]:
        """The metadata of the table's latest materialization; {} if there is none."""
        return latest_metadata(self._instance, table or _only_table(self.project))

    def _last(self) -> tuple[Project, Mapping[str, Any]]:
        """The project written last, and the mapping it was written from."""
        if self._written is None:
            raise AssertionError("no project yet: call loads.configure(...) first")
        return self._written


def _only_table(project: Project) -> str:
    if len(project.tables) != 1:
        names = ", ".join(t.name for t in project.tables)
        raise AssertionError(f"{project.path} has tables {names}: name the one meant")
    return project.tables[0].name
