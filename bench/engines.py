"""The engines compared: this project, and its peers run the way their users would run them.

* `ours`: the Dagster asset, materialized in-process with a persistent instance; one Spark session
  (local[*]) serves every run, as the all-tables job shares it. Its lake is plain Parquet
  (`lake: {format: parquet}`, named explicitly: the default for new tables may change).
* `ours_iceberg`: the same on an Iceberg lake (`lake: {format: iceberg}`): Spark writes the
  table through Iceberg's Spark runtime (its SparkCatalog over the default SQL catalog on SQLite,
  `<lake>/_catalog.db`), a run's snapshot on a branch and `main` fast-forwarded to it; merge
  tables are merge-on-read; maintenance runs after a commit when it is due.
* `ours_iceberg_s3`: `ours_iceberg` with the lake in a bucket of moto's S3 server (the harness
  starts it: bench/object_store.py) and the catalog's SQLite on the local disk.
* `copy`: the floor, `COPY (SELECT ...) TO STDOUT (FORMAT binary)` into /dev/null.
* `adbc`: the best single-process path: ADBC to Arrow record batches, streamed into a zstd
  Parquet file with pyarrow.
* `dlt`: `sql_table` with the pyarrow backend, incremental on `updated_at`, writing Parquet to a
  filesystem destination (over psycopg2, or PyMySQL for a `mysql://` URL).
* `connectorx`: MySQL only (bench/mysql.py): ConnectorX reads the table into Arrow, two
  partitions on the id for a full load, and pyarrow writes one zstd Parquet file.

Peers read `updated_at > <newest before the changes>`; ours and dlt keep their own cursors.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from bench.data import SCHEMA

if TYPE_CHECKING:  # imported where used: a peer's fresh process imports neither Dagster nor Spark
    from incremental_assets.lake import LakeTable
    from incremental_assets.lake.iceberg import IcebergLake


class Ours:
    def __init__(
        self,
        workdir: Path,
        pg_url: str,
        jdbc: dict[str, str],
        settings: dict[str, Any] | None = None,
        name: str = "ours",
    ) -> None:
        """`settings` overrides parts of the configuration: `source`, `lake`, `spark_conf`.

        The lake is plain Parquet unless `settings["lake"]["format"]` says otherwise.
        """
        import dagster as dg
        import yaml

        from incremental_assets.config import load_project
        from incremental_assets.factory import build_table_asset
        from incremental_assets.resources import IncrementalSparkResource
        from incremental_assets.translator import IncrementalAssetsTranslator

        common = {
            "source": "pg",
            "table": f"{SCHEMA}.orders",
            "cursor": "updated_at",
            "primary_key": ["id"],
        }
        self.name = name
        settings = settings or {}
        config = {
            "spark": {
                "master": "local[*]",
                "conf": {
                    "spark.ui.enabled": "false",
                    "spark.driver.memory": "4g",
                    **settings.get("spark_conf", {}),
                },
            },
            "lake": {
                "path": str(workdir / "lake"),
                "format": "parquet",
                **settings.get("lake", {}),
            },
            "sources": {"pg": {"type": "jdbc", **jdbc, **settings.get("source", {})}},
            "tables": [
                {"name": "orders", "mode": "append", **common},
                {"name": "orders_merge", "mode": "merge", **common},
            ],
        }
        (workdir / "incremental_assets.yaml").write_text(yaml.safe_dump(config))
        self.project = load_project(workdir / "incremental_assets.yaml")
        home = workdir / "dagster_home"
        home.mkdir(exist_ok=True)
        self.instance = dg.DagsterInstance.from_config(str(home))
        self.spark = IncrementalSparkResource.from_spec(self.project.spark)
        self.spark.spark_session.range(1).count()  # start the session outside the measurements
        translator = IncrementalAssetsTranslator(self.project.lake)
        self.identifiers = {t.name: translator.lake_table_name(t) for t in self.project.tables}
        self.assets = {
            t.name: build_table_asset(self.project, t, translator) for t in self.project.tables
        }
        self.dg = dg
        self.last_table: str | None = None  # the table the last op ran

    def materialize(self, table: str, full_refresh: bool = False) -> Mapping[str, Any]:
        """One in-process run of `table`: the metadata its materialization recorded."""
        result = self.dg.materialize(
            [self.assets[table]],
            instance=self.instance,
            resources={"spark": self.spark},
            run_config={"ops": {table: {"config": {"full_refresh": full_refresh}}}},
        )
        event = result.get_asset_materialization_events()[0]
        return event.materialization.metadata

    def run_table(self, table: str, full_refresh: bool = False) -> dict[str, Any]:
        from bench.recorded import recorded

        self.last_table = table
        return recorded(self.materialize(table, full_refresh))

    def table_state(self) -> dict[str, Any]:
        """What the table the last op ran holds now (`bench/lake_state.py`); the worker reads it
        after the op's clock stopped."""
        from bench.lake_state import table_state

        return table_state(self.lake_table(self.last_table)) if self.last_table else {}

    def lake_table(self, table: str) -> LakeTable:
        from incremental_assets.lake import open_lake

        return open_lake(self.project.lake, table, self.identifiers[table])

    def full(self, since: str) -> dict[str, Any]:
        return self.run_table("orders", full_refresh=True)

    def incremental(self, since: str) -> dict[str, Any]:
        return self.run_table("orders")

    def merge(self, since: str) -> dict[str, Any]:
        return self.run_table("orders_merge")

    def merge_setup(self, since: str) -> dict[str, Any]:
        return self.run_table("orders_merge", full_refresh=True)

    def scan(self, since: str, repeats: int = 1) -> dict[str, Any]:
        """Read the whole merge table, every row and column with the deletes applied, `repeats`
        times through Spark (into Spark's `noop` sink) and through PyIceberg (`to_arrow`,
        the catalog's `load_table` included): the seconds of each read."""
        from incremental_assets.lake.iceberg.metadata import pyiceberg_catalog

        lake = self._iceberg("orders_merge")
        session = lake.session(self.spark.spark_session)
        spark_seconds, pyiceberg_seconds, rows = [], [], 0
        for _ in range(repeats):
            started = time.perf_counter()
            session.read.table(lake.reference()).write.format("noop").mode("overwrite").save()
            spark_seconds.append(time.perf_counter() - started)
            started = time.perf_counter()
            rows = pyiceberg_catalog(lake.catalog).load_table(lake.name).scan().to_arrow().num_rows
            pyiceberg_seconds.append(time.perf_counter() - started)
        return {
            "rows": rows,
            "files": 0,
            "spark_seconds": spark_seconds,
            "pyiceberg_seconds": pyiceberg_seconds,
        }

    def compact(self, since: str) -> dict[str, Any]:
        """The merge table compacted whole, as a reference for its scans: every data file
        rewritten with its deletes applied (`rewrite_data_files`, `rewrite-all`, the deletes
        left dangling removed), then its manifests (`rewrite_manifests`)."""
        lake = self._iceberg("orders_merge")
        session = lake.session(self.spark.spark_session)
        prefix = f"CALL {lake.catalog.name}.system"
        table = f"table => '{lake.procedure_table()}'"
        options = "options => map('rewrite-all', 'true', 'remove-dangling-deletes', 'true')"
        rewritten = session.sql(f"{prefix}.rewrite_data_files({table}, {options})").first()
        session.sql(f"{prefix}.rewrite_manifests({table})").collect()
        self.last_table = "orders_merge"
        done = rewritten.asDict() if rewritten is not None else {}
        return {"rows": None, "files": int(done.get("added_data_files_count", 0)), "done": done}

    def _iceberg(self, table: str) -> IcebergLake:
        from incremental_assets.lake.iceberg import IcebergLake

        lake = self.lake_table(table)
        if not isinstance(lake, IcebergLake):
            raise RuntimeError(f"{self.name}: {table} is not an Iceberg table")
        return lake


def _query(since: str | None) -> str:
    where = f" WHERE updated_at > TIMESTAMPTZ '{since}'" if since else ""
    return f"SELECT * FROM {SCHEMA}.orders{where}"


class Copy:
    name = "copy"

    def __init__(self, workdir: Path, pg_url: str, jdbc: dict[str, str]) -> None:
        self.pg_url = pg_url

    def _copy(self, since: str | None) -> dict[str, Any]:
        size = 0
        with (
            psycopg.connect(self.pg_url) as conn,
            conn.cursor() as cursor,
            open(os.devnull, "wb") as sink,
            cursor.copy(f"COPY ({_query(since)}) TO STDOUT (FORMAT binary)") as copy,
        ):
            for chunk in copy:
                size += len(chunk)
                sink.write(chunk)
        # The floor counts nothing; the harness takes the row count from another engine's run.
        return {"rows": None, "files": 0, "bytes": size}

    def full(self, since: str) -> dict[str, Any]:
        return self._copy(None)

    def incremental(self, since: str) -> dict[str, Any]:
        return self._copy(since)


class Adbc:
    name = "adbc"

    def __init__(self, workdir: Path, pg_url: str, jdbc: dict[str, str]) -> None:
        self.pg_url = pg_url
        self.out = workdir / "adbc"
        # A fresh process per run (the end-to-end benchmark) numbers its file after those there.
        self.runs = len(list(self.out.glob("run-*.parquet")))

    def _load(self, since: str | None) -> dict[str, Any]:
        import adbc_driver_postgresql.dbapi as adbc
        import pyarrow.parquet as pq

        self.runs += 1
        self.out.mkdir(exist_ok=True)
        rows, path = 0, self.out / f"run-{self.runs:04d}.parquet"
        with adbc.connect(self.pg_url) as conn, conn.cursor() as cursor:
            cursor.execute(_query(since))
            reader = cursor.fetch_record_batch()
            with pq.ParquetWriter(path, reader.schema, compression="zstd") as writer:
                for batch in reader:
                    rows += batch.num_rows
                    writer.write_batch(batch)
        return {"rows": rows, "files": 1}

    def full(self, since: str) -> dict[str, Any]:
        shutil.rmtree(self.out, ignore_errors=True)
        return self._load(None)

    def incremental(self, since: str) -> dict[str, Any]:
        return self._load(since)


class Dlt:
    name = "dlt"

    def __init__(self, workdir: Path, pg_url: str, jdbc: dict[str, str]) -> None:
        self.workdir = workdir
        self.mysql = pg_url.startswith("mysql://")
        if self.mysql:  # the database is the URL's; `bench` is both the database and the schema
            self.url = pg_url.replace("mysql://", "mysql+pymysql://", 1)
        else:
            self.url = pg_url.replace("postgresql://", "postgresql+psycopg2://", 1)
        self.fulls = 0

    def _pipeline(self, name: str) -> Any:
        import dlt

        return dlt.pipeline(
            pipeline_name=name,
            pipelines_dir=str(self.workdir / "dlt_pipelines"),
            destination=dlt.destinations.filesystem(bucket_url=str(self.workdir / f"dlt_{name}")),
            dataset_name="bench",
        )

    def _run(self, pipeline: Any, incremental: bool) -> dict[str, Any]:
        import dlt
        from dlt.sources.sql_database import sql_table

        table = sql_table(
            credentials=self.url,
            schema=None if self.mysql else SCHEMA,
            table="orders",
            backend="pyarrow",
            incremental=dlt.sources.incremental("updated_at") if incremental else None,
        )
        info = pipeline.run(
            table,
            loader_file_format="parquet",
            write_disposition="append" if incremental else "replace",
        )
        rows = pipeline.last_trace.last_normalize_info.row_counts.get("orders", 0)
        files = sum(len(package.jobs["completed_jobs"]) for package in info.load_packages)
        return {"rows": rows, "files": files}

    def full(self, since: str) -> dict[str, Any]:
        self.fulls += 1
        return self._run(self._pipeline(f"full_{self.fulls}"), incremental=False)

    def incremental(self, since: str) -> dict[str, Any]:
        return self._run(self._pipeline("incremental"), incremental=True)


class ConnectorX:
    name = "connectorx"

    def __init__(self, workdir: Path, url: str, jdbc: dict[str, str]) -> None:
        self.url = url
        self.out = workdir / "connectorx"
        self.runs = len(list(self.out.glob("run-*.parquet")))

    def _load(self, since: str | None) -> dict[str, Any]:
        import connectorx as cx
        import pyarrow.parquet as pq

        self.runs += 1
        self.out.mkdir(exist_ok=True)
        query = f"SELECT * FROM {SCHEMA}.orders"
        if since:
            table = cx.read_sql(
                self.url, f"{query} WHERE updated_at > '{since}'", return_type="arrow"
            )
        else:
            table = cx.read_sql(
                self.url, query, return_type="arrow", partition_on="id", partition_num=2
            )
        pq.write_table(table, self.out / f"run-{self.runs:04d}.parquet", compression="zstd")
        return {"rows": table.num_rows, "files": 1}

    def full(self, since: str) -> dict[str, Any]:
        shutil.rmtree(self.out, ignore_errors=True)
        return self._load(None)

    def incremental(self, since: str) -> dict[str, Any]:
        return self._load(since)


class OursIceberg(Ours):
    """`ours` with `lake: {format: iceberg}`; other lake settings pass through."""

    def __init__(
        self,
        workdir: Path,
        pg_url: str,
        jdbc: dict[str, str],
        settings: dict[str, Any] | None = None,
    ) -> None:
        settings = settings or {}
        lake = {**settings.get("lake", {}), "format": "iceberg"}
        super().__init__(workdir, pg_url, jdbc, {**settings, "lake": lake}, name="ours_iceberg")


class OursIcebergS3(Ours):
    """`ours_iceberg` on a lake in a bucket of moto's S3 server: `settings["lake"]` names it
    (path, catalog with its `s3.*` properties; bench/object_store.py)."""

    def __init__(
        self,
        workdir: Path,
        pg_url: str,
        jdbc: dict[str, str],
        settings: dict[str, Any] | None = None,
    ) -> None:
        settings = settings or {}
        lake = {**settings.get("lake", {}), "format": "iceberg"}
        if not str(lake.get("path", "")).startswith("s3://"):
            raise ValueError("ours_iceberg_s3 needs settings {lake: {path: s3://..., catalog}}")
        super().__init__(workdir, pg_url, jdbc, {**settings, "lake": lake}, name="ours_iceberg_s3")


# Our engines: the report shows their Spark jobs and stages, and runs the merges with them.
OURS = ("ours", "ours_iceberg", "ours_iceberg_s3")
# Iceberg engines: the read-amplification phase (A50) runs on them.
ICEBERG = ("ours_iceberg", "ours_iceberg_s3")
ENGINES: dict[str, Any] = {
    "ours": Ours,
    "ours_iceberg": OursIceberg,
    "ours_iceberg_s3": OursIcebergS3,
    **{engine.name: engine for engine in (Copy, Adbc, Dlt, ConnectorX)},
}
