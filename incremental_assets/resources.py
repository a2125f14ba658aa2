"""The Spark resource: dagster-pyspark's lazy session, built from the `spark:` section.

The session starts on first use, so runs that never touch Spark (checks, empty selections) don't
pay for a JVM. One session serves every table of a run. It is stopped at teardown only if this
resource started it: a session that already existed in the process (a notebook, a test suite)
is left running.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from incremental_assets.spec import SparkSpec

# Defaults that make the lake exact and quiet; the `spark.conf` section overrides any of them.
SPARK_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.aggregatePushdown": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


class IncrementalSparkResource(LazyPySparkResource):
    """A SparkSession for incremental loads (local, standalone cluster, YARN or Kubernetes)."""

    spark_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Spark configuration: spark.master, spark.jars.packages, ...",
    )
    _owns_session: bool = PrivateAttr(default=False)

    @classmethod
    def from_spec(cls, spec: SparkSpec) -> IncrementalSparkResource:
        config = {
            **SPARK_DEFAULTS,
            "spark.master": spec.master,
            "spark.app.name": spec.app_name,
            **spec.conf,
        }
        return cls(spark_config=config)

    @property
    def spark_session(self) -> SparkSession:
        if self._spark_session is None:
            self._owns_session = SparkSession.getActiveSession() is None
            builder = SparkSession.builder
            for key, value in self.spark_config.items():
                builder = builder.config(key, str(value))
            self._spark_session = builder.getOrCreate()
            self._spark_session.sparkContext.setLogLevel("WARN")
        return self._spark_session  # type: ignore[no-any-return]

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._spark_session is not None and self._owns_session:
            self._spark_session.stop()
