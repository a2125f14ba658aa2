"""A plain psycopg connection to a jdbc:postgresql source, opened as pgjdbc would: no JVM.

Sensors' probes and the run's check for nothing new use it; the JDBC URL's parameters and the
source's `properties` (SSL, options, timeouts) mean the same as they do to pgjdbc.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlparse

import psycopg

from incremental_assets.config import JdbcSourceSpec
from incremental_assets.sources.database import APPLICATION_NAME

# libpq accepts these JDBC parameters under the same names, or under the name given here.
_LIBPQ_NAMES = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslpassword": "sslpassword",
    "options": "options",
    "connectTimeout": "connect_timeout",
    "connect_timeout": "connect_timeout",
    "ApplicationName": "application_name",
    "application_name": "application_name",
}
_NON_VALIDATING = "org.postgresql.ssl.NonValidatingFactory"


def connect_args(source: JdbcSourceSpec) -> dict[str, Any]:
    """psycopg connection arguments from a `jdbc:postgresql://host[:port][,host2...]/db?...` URL."""
    url = urlparse(source.url.removeprefix("jdbc:"))
    hosts = [h.rsplit(":", 1) if ":" in h else [h, "5432"] for h in url.netloc.split(",") if h]
    jdbc = {**dict(parse_qsl(url.query, keep_blank_values=True)), **source.properties}
    params = libpq_parameters(jdbc)
    return {
        "host": ",".join(h for h, _ in hosts) or "localhost",
        "port": ",".join(p for _, p in hosts) or "5432",
        "dbname": url.path.lstrip("/") or None,
        "user": source.user,
        "password": source.password,
        "connect_timeout": params.pop("connect_timeout", "10"),
        "application_name": params.pop("application_name", APPLICATION_NAME),
        **params,
    }


def libpq_parameters(jdbc: dict[str, str]) -> dict[str, str]:
    """pgjdbc's connection parameters in libpq's terms, SSL included.

    pgjdbc's `ssl=true` verifies the certificate and the host name (libpq's `verify-full`), unless
    `sslfactory` is the non-validating one (`require`); `ssl=false` turns SSL off.
    """
    params = {_LIBPQ_NAMES[k]: v for k, v in jdbc.items() if k in _LIBPQ_NAMES}
    if "sslmode" not in params and "ssl" in jdbc:
        if jdbc["ssl"].lower() == "false":
            params["sslmode"] = "disable"
        elif jdbc.get("sslfactory") == _NON_VALIDATING:
            params["sslmode"] = "require"
        else:
            params["sslmode"] = "verify-full"
    return params


# Settings that make a row's text the same in every session (zone, date style, float digits).
PINNED_SETTINGS = (
    "-c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=postgres -c extra_float_digits=3 "
    "-c bytea_output=hex"
)


def connect(source: JdbcSourceSpec, pinned: bool = False) -> psycopg.Connection:
    """An autocommit connection; `pinned` fixes how values print, for fingerprints of rows."""
    args = connect_args(source)
    if pinned:
        args["options"] = f"{args.get('options', '')} {PINNED_SETTINGS}".strip()
    return psycopg.connect(**args, autocommit=True)


def fetch_row(conn: psycopg.Connection, sql: str) -> dict[str, Any]:
    cursor = conn.execute(sql)
    names = [column.name for column in cursor.description or []]
    row = cursor.fetchone()
    assert row is not None  # an aggregate always returns its row
    return dict(zip(names, row, strict=True))
