"""The Iceberg catalog a lake's tables live in, as PyIceberg and Spark each configure it.

One catalog, two clients: Spark writes the tables (Iceberg's `SparkCatalog`), PyIceberg and the
standard library read them (a run's facts, the CLI, readers). Both name the catalog the same
way, since a JDBC catalog stores that name in every row: a client under another name sees an
empty catalog.

`lake.catalog` holds PyIceberg's properties (`type`, `uri`, ...); unset, the catalog is the
lake's own SQLite file, `<lake>/_catalog.db`, in WAL mode so that readers never wait for a
writer. The same properties become Spark's `spark.sql.catalog.<name>.*`:

    sql on SQLite      sqlite:////lake/_catalog.db     -> jdbc:sqlite:/lake/_catalog.db
    sql on PostgreSQL  postgresql+psycopg2://u:p@h/db  -> jdbc:postgresql://h/db, jdbc.user/password
    rest, glue, hive   passed on as they are

Secrets (passwords in URIs, before the host or in the query, and properties named `*password*`,
`*secret*`, `*token*`, `*credential*`, `*pwd*`) never appear in a message: `redact` removes them
from anything a catalog or Spark says, wherever they stand as a whole value.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from incremental_assets.config import LakeSpec

DEFAULT_NAME = "incremental_assets"
CATALOG_FILE = "_catalog.db"
# SQLite: readers don't wait for a writer (WAL), and a writer waits for another one instead of
# failing at once with SQLITE_BUSY, which Iceberg's JDBC catalog reports as an unknown failure.
_SQLITE_OPTIONS = "journal_mode=WAL&busy_timeout=30000"
_SECRET_WORDS = r"password|secret|token|credential|pwd"
_SECRET_KEYS = re.compile(_SECRET_WORDS, re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(?P<scheme>[a-z0-9+.-]+://[^:/@\s]+):(?P<password>[^@\s]+)@", re.I)
# A secret parameter of a URI's query (`?password=...`, JDBC's `;password=...;`): its value ends
# where the parameter does, or at a quote or a space.
_QUERY_SECRET = re.compile(
    rf"(?P<key>[?&;][^\s=&;?#/]*(?:{_SECRET_WORDS})[^\s=&;?#/]*=)[^\s&;#\"']+", re.I
)
_PYICEBERG_ONLY = ("py-io-impl",)
_S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


@dataclass(frozen=True)
class IcebergCatalog:
    """A lake's catalog: its name, and the properties each client takes."""

    name: str
    pyiceberg: dict[str, str]  # PyIceberg's `load_catalog` properties
    spark: dict[str, str]  # `spark.sql.catalog.<name>.<key>`; "" is the plugin class
    own: bool  # the lake's default SQLite file, which no other lake shares
    sqlite_path: str | None = None  # a SQL catalog on a local SQLite file: its path
    secrets: tuple[str, ...] = ()

    def redact(self, text: str) -> str:
        """`text` without the catalog's secrets, nor any password written into a URI. A secret
        is replaced where it stands as a whole value, not inside a longer word (a one-letter
        secret would otherwise blot out that letter everywhere)."""
        if self.secrets:
            longest_first = sorted(self.secrets, key=len, reverse=True)
            alternatives = "|".join(re.escape(secret) for secret in longest_first)
            text = re.sub(rf"(?<!\w)(?:{alternatives})(?!\w)", "***", text)
        text = _QUERY_SECRET.sub(r"\g<key>***", text)
        return _URI_PASSWORD.sub(r"\g<scheme>:***@", text)

    def describe(self) -> str:
        """Where the catalog is, for messages: its URI without credentials."""
        uri = self.pyiceberg.get("uri", "")
        return self.redact(uri) if uri else f"type {self.pyiceberg.get('type', '?')}"

    def spark_conf(self) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{self.name}"
        return {f"{prefix}.{key}" if key else prefix: value for key, value in self.spark.items()}


def catalog_of(spec: LakeSpec) -> IcebergCatalog:
    """The catalog `spec` names, or the lake's own SQLite file."""
    given = {str(k): str(v) for k, v in spec.catalog.items()}
    name = given.pop("name", DEFAULT_NAME)
    lake = spec.path.rstrip("/")
    own = not given
    if own:
        given = {"type": "sql", "uri": f"sqlite:///{lake}/{CATALOG_FILE}"}
    spark = _spark_properties(given, lake)
    secrets = tuple(
        value for key, value in {**given, **spark}.items() if _SECRET_KEYS.search(key) and value
    )
    secrets += _uri_passwords(given.get("uri", ""))
    uri = given.get("uri", "")
    sqlite = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    return IcebergCatalog(
        name=name,
        pyiceberg=given,
        spark=spark,
        own=own,
        sqlite_path=sqlite.split("?", 1)[0] if sqlite else None,
        secrets=tuple(dict.fromkeys(secrets)),
    )


def _spark_properties(given: dict[str, str], lake: str) -> dict[str, str]:
    kind = given.get("type", "rest")
    rest = {k: v for k, v in given.items() if k not in ("type", "uri", *_PYICEBERG_ONLY)}
    spark = {"": "org.apache.iceberg.spark.SparkCatalog", "cache-enabled": "false"}
    spark["warehouse"] = rest.pop("warehouse", lake)
    if kind == "sql":
        spark |= {"type": "jdbc", "jdbc.schema-version": "V1", **_jdbc(given.get("uri", ""))}
    else:
        spark |= {"type": kind, **({"uri": given["uri"]} if "uri" in given else {})}
    if spark["warehouse"].startswith(("s3://", "s3a://")) or lake.startswith(("s3://", "s3a://")):
        spark.setdefault("io-impl", _S3_FILE_IO)
    if "s3.region" in rest:
        rest.setdefault("client.region", rest["s3.region"])
    return spark | rest


def _jdbc(uri: str) -> dict[str, str]:
    """A SQLAlchemy URL (PyIceberg's SQL catalog) as Iceberg's JDBC catalog takes it."""
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///").split("?", 1)[0]
        return {"uri": f"jdbc:sqlite:{path}?{_SQLITE_OPTIONS}"}
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme in ("postgresql", "postgres"):
        scheme = "postgresql"
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    query = f"?{parts.query}" if parts.query else ""
    found = {"uri": f"jdbc:{scheme}://{host}{port}{parts.path}{query}"}
    if parts.username:
        found["jdbc.user"] = unquote(parts.username)
    if parts.password:
        found["jdbc.password"] = unquote(parts.password)
    return found


def _uri_passwords(uri: str) -> tuple[str, ...]:
    """The passwords written into a URI: before its host (`user:password@`) and in its query."""
    try:
        parts = urlsplit(uri)
        password = parts.password
    except ValueError:
        return ()
    before_host = [unquote(password)] if password else []
    in_query = [value for key, value in parse_qsl(parts.query) if _SECRET_KEYS.search(key)]
    return (*before_host, *in_query)


# The catalog each session was bound to here (by its properties' digest), and the sessions made
# for a catalog whose name another lake's catalog already took in a session.
_BOUND: weakref.WeakKeyDictionary[SparkSession, str] = weakref.WeakKeyDictionary()
_SESSIONS: dict[tuple[int, str], SparkSession] = {}


def bind(spark: SparkSession, catalog: IcebergCatalog) -> SparkSession:
    """A session in which `catalog.name` is this catalog: `spark` itself, unless another catalog
    of that name is registered there (Spark keeps a catalog for the session's life, and would go
    on writing to it); then a new session of the same Spark application."""
    wanted = catalog.spark_conf()
    digest = hashlib.md5(json.dumps(wanted, sort_keys=True).encode(), usedforsecurity=False)
    key = digest.hexdigest()
    bound = _BOUND.get(spark)
    if bound == key:
        return spark
    if bound is None and _unregistered(spark, catalog.name, wanted):
        for name, value in wanted.items():
            spark.conf.set(name, value)
        _BOUND[spark] = key
        return spark
    cached = _SESSIONS.get((id(spark), key))
    if cached is not None:
        return cached
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from incremental_assets.errors import ConfigError

        raise ConfigError(
            f"this Spark Connect session already uses an Iceberg catalog named "
            f"'{catalog.name}' for another lake, and Spark keeps a catalog for the session's "
            "life. Fix: give this lake's catalog another name (lake.catalog.name), or use a "
            "session per lake."
        )
    session = spark.newSession()
    for name, value in wanted.items():
        session.conf.set(name, value)
    _BOUND[session] = key
    _SESSIONS[(id(spark), key)] = session
    return session


def _unregistered(spark: SparkSession, name: str, wanted: dict[str, str]) -> bool:
    """Whether the session has no catalog of that name yet, or one set as `wanted` (compared on
    what a Spark Connect server shows: it hides secrets' values)."""
    current = spark.conf.get(f"spark.sql.catalog.{name}", None)
    if current is None:
        return True
    shown = {k: v for k, v in wanted.items() if not _SECRET_KEYS.search(k)}
    return all(spark.conf.get(k, None) == v for k, v in shown.items())
