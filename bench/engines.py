"""The engines compared: this project, and its peers run the way their users would run them.

* `ours`: the Dagster asset, materialized in-process with a persistent instance; one Spark session
  (local[*]) serves every run, as the all-tables job shares it. Its lake is plain Parquet
  (`lake: {format: parquet}`, named explicitly: the default for new tables may change).
* `ours_iceberg`: the same on an Iceberg lake (`lake: {format: iceberg}`: Spark writes the files,
  PyIceberg commits them through the default SQL catalog on SQLite, `<lake>/_catalog.db`).
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
from pathlib import Path
from typing import Any

import psycopg

from bench.data import SCHEMA


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
        self.assets = {
            t.name: build_table_asset(self.project, t, translator) for t in self.project.tables
        }
        self.dg = dg
        self.lake = workdir / "lake"

    def materialize(self, table: str, full_refresh: bool = False) -> dict[str, Any]:
        """One in-process run of `table`: the metadata its materialization recorded."""
        result = self.dg.materialize(
            [self.assets[table]],
            instance=self.instance,
            resources={"spark": self.spark},
            run_config={"ops": {table: {"config": {"full_refresh": full_refresh}}}},
        )
        event = result.get_asset_materialization_events()[0]
        return {k: v.value for k, v in event.materialization.metadata.items()}

    def _run(self, table: str, full_refresh: bool = False) -> dict[str, Any]:
        metadata = self.materialize(table, full_refresh)
        changed = sum(metadata.get(k, 0) for k in ("rows_inserted", "rows_updated", "rows_deleted"))
        return {
            "rows": metadata["rows_extracted"],
            "files": metadata["files_written"],
            "engine_seconds": metadata["extract_seconds"] + metadata["write_seconds"],
            "rows_rewritten": metadata.get("rows_rewritten"),
            "merge_strategy": metadata.get("merge_strategy"),
            "rows_changed": changed if "rows_inserted" in metadata else None,
            "spark_jobs": metadata.get("spark_jobs"),
            "spark_stages": metadata.get("spark_stages"),
            # Plain Parquet keeps its files in the table's folder; Iceberg under data/, with
            # the files the snapshots it keeps still hold.
            "bytes": sum(f.stat().st_size for f in (self.lake / table).rglob("part-*.parquet")),
        }

    def full(self, since: str) -> dict[str, Any]:
        return self._run("orders", full_refresh=True)

    def incremental(self, since: str) -> dict[str, Any]:
        return self._run("orders")

    def merge(self, since: str) -> dict[str, Any]:
        return self._run("orders_merge")

    def merge_setup(self, since: str) -> dict[str, Any]:
        return self._run("orders_merge", full_refresh=True)


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


# Our engines, one per lake format: the report shows their Spark jobs and stages.
OURS = ("ours", "ours_iceberg")
ENGINES: dict[str, Any] = {
    "ours": Ours,
    "ours_iceberg": OursIceberg,
    **{engine.name: engine for engine in (Copy, Adbc, Dlt, ConnectorX)},
}
