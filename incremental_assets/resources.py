"""The Spark resource: a lazy session, built from the `spark:` section.

The session starts on first use, so runs that never touch Spark (checks, empty selections,
nothing new) don't pay for a JVM, nor for importing pyspark (dagster-pyspark's
`LazyPySparkResource`, which this was, imports it with its module). One session serves every table
of a run. It is stopped at teardown only if this resource started it: a session that already existed
in the process (a notebook, a test suite) is left running.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import dagster as dg
from pydantic import Field, PrivateAttr

from incremental_assets.config import SparkSpec
from incremental_assets.engine import HOME_FOLDER, EngineLease, lease_engine
from incremental_assets.engine_settings import described
from incremental_assets.jvm import check_before_session
from incremental_assets.spark_api import sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

# Defaults that make the lake exact and quiet; the `spark.conf` section overrides any of them.
SPARK_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.aggregatePushdown": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


_LOG_CONFIG = "spark_log4j2.properties"


def spark_log_path() -> Path:
    """Where local sessions keep Spark's own log: under $DAGSTER_HOME, else the temporary folder."""
    home = os.environ.get("DAGSTER_HOME")
    root = Path(home) / HOME_FOLDER / "logs" if home else Path(tempfile.gettempdir())
    return root / "spark.log"


def with_quiet_log(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with Spark's log sent to `spark_log_path()` instead of the console.

    Spark logs a task's failure at every level it passes (the executor, the task set, the job),
    each with the message the run then fails with once. A log4j2 configuration of the user's own
    in `spark.driver.extraJavaOptions` is kept as it is.
    """
    options = str(config.get("spark.driver.extraJavaOptions", ""))
    if "log4j2.configurationFile" in options:
        return config
    log = spark_log_path()
    log.parent.mkdir(parents=True, exist_ok=True)
    properties = resources.files("incremental_assets") / _LOG_CONFIG
    ours = (
        f"-Dlog4j2.configurationFile=file:{properties} -Dincremental_assets.spark_log={log} "
        f"-Dincremental_assets.pid={os.getpid()}"
    )
    return {**config, "spark.driver.extraJavaOptions": f"{options} {ours}".strip()}


# The client's default retries wait out a dead server for ten minutes or more. These ride out a
# blip of about 9 s per call, so a run whose server is gone fails within half a minute, saying so
# (see sources/failures.py).
CONNECT_RETRIES, CONNECT_MAX_BACKOFF_MS = 5, 5_000


class IncrementalSparkResource(dg.ConfigurableResource["IncrementalSparkResource"]):
    """A SparkSession for incremental loads: local, a cluster manager, or a Spark Connect server."""

    spark_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Spark configuration: spark.master, spark.jars, ...",
    )
    remote: str | None = Field(
        default=None,
        description="A Spark Connect URL (sc://host:15002); the server then owns master and jars.",
    )
    engine: str = Field(
        default="local",
        description="shared: use the engine `incremental-assets engine start` keeps warm under "
        "DAGSTER_HOME when it is up, else start a session of this process's own.",
    )
    _spark_session: SparkSession | None = PrivateAttr(default=None)
    _owns_session: bool = PrivateAttr(default=False)
    _connected: bool = PrivateAttr(default=False)
    _description: str = PrivateAttr(default="not started")
    _lease: EngineLease | None = PrivateAttr(default=None)

    @classmethod
    def from_spec(cls, spec: SparkSpec) -> IncrementalSparkResource:
        config = {
            **SPARK_DEFAULTS,
            "spark.master": spec.master,
            "spark.app.name": spec.app_name,
            **spec.conf,
        }
        return cls(spark_config=config, remote=spec.remote, engine=spec.engine)

    @property
    def spark_session(self) -> SparkSession:
        if self._spark_session is None:
            self._spark_session = self._session()
        return self._spark_session

    @property
    def log_file(self) -> Path | None:
        """Where Spark's own log goes, for a session this process started; None for others."""
        if self._spark_session is None or self._connected:
            return None
        return spark_log_path()

    @property
    def description(self) -> str:
        """Which Spark the session is: for the run's log and its `spark` metadata."""
        return self._description

    def _session(self) -> SparkSession:
        if self.remote:
            self._description = f"the Spark Connect server at {self.remote}"
            return self._connect(self.remote)
        home = os.environ.get("DAGSTER_HOME")
        self._lease = lease_engine(home, self.spark_config) if self.engine == "shared" else None
        if self._lease is not None:
            shared, restarted_for = self._lease.engine, self._lease.restarted_for
            self._description = f"the shared engine at {shared.url} (pid {shared.pid})"
            if restarted_for:
                self._description += f", restarted for what it lacked: {described(restarted_for)}"
            return self._connect(shared.url)
        self._description = f"a local session ({self.spark_config.get('spark.master')})"
        if self.engine == "shared":
            self._description += ", since the shared engine is not running"
        return self._start_local()

    def _start_local(self) -> SparkSession:
        check_before_session(self.spark_config)
        self._owns_session = sql.SparkSession.getActiveSession() is None
        builder = sql.SparkSession.builder
        for key, value in with_quiet_log(self.spark_config).items():
            builder = builder.config(key, str(value))
        return builder.getOrCreate()

    def _connect(self, url: str) -> SparkSession:
        # Only session settings travel to a Connect server; the rest was fixed when it started.
        self._owns_session = self._connected = True
        session = sql.SparkSession.builder.remote(url).getOrCreate()
        # Imported here: the Connect client loads pandas, most of a second of every process's
        # start, and only Connect sessions need it.
        from pyspark.sql.connect.client.retries import DefaultPolicy

        cast("ConnectSession", session).client.set_retry_policies(
            [DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=CONNECT_MAX_BACKOFF_MS)]
        )
        for key, value in self.spark_config.items():
            # Static ones (spark.sql.extensions) can't change in a session; the server has them.
            if key.startswith("spark.sql.") and session.conf.isModifiable(key):
                session.conf.set(key, str(value))
        return session

    def stop(self) -> None:
        """Stop the session if this resource started it (one that already existed is left)."""
        self.teardown_after_execution(None)

    def teardown_after_execution(self, context: dg.InitResourceContext | None) -> None:
        if self._spark_session is not None and self._owns_session:
            if self._connected:
                # Releasing the session is best effort: a server that stopped answering must not
                # hold the run's end for another round of retries.
                cast("ConnectSession", self._spark_session).client.set_retry_policies([])
            self._spark_session.stop()
        if self._lease is not None:
            self._lease.release()
