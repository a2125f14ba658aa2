"""A plain PyMySQL connection to a jdbc:mysql or jdbc:mariadb source: no JVM.

Sensors' probes and a run's check for nothing new use it, with the session pinned as the JDBC
reader's is (`time_zone = '+00:00'`). SSL parameters of the URL are passed on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlparse

import pymysql

from incremental_assets.config import JdbcSourceSpec
from incremental_assets.sources.database import APPLICATION_NAME


def connect_args(source: JdbcSourceSpec) -> dict[str, Any]:
    """PyMySQL connection arguments from a `jdbc:mysql://host[:port]/db?...` URL."""
    url = urlparse(source.url.split(":", 1)[1])
    host, _, port = url.netloc.split(",")[0].partition(":")
    params = {**dict(parse_qsl(url.query, keep_blank_values=True)), **source.properties}
    args: dict[str, Any] = {
        "host": host or "localhost",
        "port": int(port or 3306),
        "database": url.path.lstrip("/") or None,
        "user": source.user,
        "password": source.password or "",
        "connect_timeout": int(params.get("connectTimeout", "10000")) // 1000 or 10,
        "autocommit": True,
        "init_command": "SET time_zone = '+00:00'",
        "program_name": APPLICATION_NAME,
    }
    if params.get("useSSL", params.get("sslMode", "")).lower() in (
        "true",
        "required",
        "verify_ca",
        "verify_identity",
    ):
        args["ssl"] = {"ca": params.get("serverSslCert")} if params.get("serverSslCert") else {}
    return args


def connect(source: JdbcSourceSpec) -> pymysql.Connection:
    return pymysql.connect(**connect_args(source))
