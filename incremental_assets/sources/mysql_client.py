"""A plain PyMySQL connection to a jdbc:mysql or jdbc:mariadb source: no JVM.

Sensors' probes and a run's check for nothing new use it, with the session set up as the JDBC
reader's is (`SESSION_SETUP`). SSL parameters of the URL are passed on.
"""

from __future__ import annotations

from ssl import CERT_NONE, CERT_REQUIRED, get_default_verify_paths
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlparse

from incremental_assets.config import JdbcSourceSpec
from incremental_assets.sources.database import APPLICATION_NAME

if TYPE_CHECKING:
    import pymysql

# Every session, the JDBC reader's and the probes': TIMESTAMP read as its instant, CHAR
# unpadded whatever the server's own SQL mode.
SESSION_SETUP = (
    "SET time_zone = '+00:00', sql_mode = REPLACE(@@sql_mode, 'PAD_CHAR_TO_FULL_LENGTH', '')"
)


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
        "init_command": SESSION_SETUP,
        "program_name": APPLICATION_NAME,
    }
    ssl_args = _ssl(params)
    if ssl_args is not None:
        args["ssl"] = ssl_args
    return args


def _ssl(params: dict[str, str]) -> dict[str, Any] | None:
    """PyMySQL's `ssl` from Connector/J's settings, verifying as much as the driver would.

    MariaDB Connector/J: `sslMode=trust|verify-ca|verify-full` (or `useSsl=true`, which
    verifies); MySQL Connector/J: `sslMode=REQUIRED|VERIFY_CA|VERIFY_IDENTITY` (or `useSSL=true`).
    """
    mode = params.get("sslMode", "").lower().replace("_", "-")
    if not mode and params.get("useSsl", params.get("useSSL", "")).lower() == "true":
        mode = "verify-full"
    if mode in ("", "disable", "disabled", "preferred"):
        return None
    if mode in ("trust", "required"):
        return {"check_hostname": False, "verify_mode": CERT_NONE}
    # PyMySQL verifies nothing without a CA: the system's stands in when none is named.
    system = get_default_verify_paths()
    return {
        "check_hostname": mode in ("verify-full", "verify-identity"),
        "verify_mode": CERT_REQUIRED,
        "ca": params.get("serverSslCert") or system.cafile,
        "capath": None if params.get("serverSslCert") else system.capath,
    }


def connect(source: JdbcSourceSpec) -> pymysql.Connection:
    import pymysql

    return pymysql.connect(**connect_args(source))
