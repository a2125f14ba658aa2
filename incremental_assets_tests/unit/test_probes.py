"""The sources' pure parts: JDBC URLs in libpq's and PyMySQL's terms, the URL Spark reads, and
which files a glob table reads."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec
from incremental_assets.sources import database_of
from incremental_assets.sources.listing import source_files
from incremental_assets.sources.mysql_client import SESSION_SETUP
from incremental_assets.sources.mysql_client import connect_args as mysql_args
from incremental_assets.sources.pg_client import connect_args


@pytest.mark.parametrize(
    ("query", "properties", "expected"),
    [
        ("", {}, {}),
        ("?ssl=true", {}, {"sslmode": "verify-full"}),  # pgjdbc's ssl=true verifies everything
        ("?ssl", {}, {"sslmode": "verify-full"}),
        ("?ssl=false", {}, {"sslmode": "disable"}),
        (
            "?ssl=true&sslfactory=org.postgresql.ssl.NonValidatingFactory",
            {},
            {"sslmode": "require"},
        ),
        ("?ssl=true&sslmode=verify-ca", {}, {"sslmode": "verify-ca"}),
        (
            "",
            {"sslmode": "require", "sslrootcert": "/ca.pem"},
            {"sslmode": "require", "sslrootcert": "/ca.pem"},
        ),
        (
            "?connectTimeout=3&ApplicationName=etl",
            {},
            {"connect_timeout": "3", "application_name": "etl"},
        ),
    ],
)
def test_jdbc_parameters_become_libpq_ones(
    query: str, properties: dict[str, str], expected: dict[str, str]
) -> None:
    source = JdbcSourceSpec(
        name="shop", url=f"jdbc:postgresql://db:6432/shop{query}", properties=properties
    )
    args = connect_args(source)
    assert (args["host"], args["port"], args["dbname"]) == ("db", "6432", "shop")
    defaults = {"connect_timeout": "10", "application_name": "incremental_assets"}
    wanted = {**defaults, **expected}
    assert {k: args[k] for k in wanted} == wanted
    assert "sslmode" in args or "sslmode" not in expected
    assert "ssl" not in args and "sslfactory" not in args


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", None),
        ("?sslMode=disable", None),
        ("?sslMode=trust", {"check_hostname": False, "verify_mode": ssl.CERT_NONE}),
        ("?sslMode=REQUIRED", {"check_hostname": False, "verify_mode": ssl.CERT_NONE}),
        ("?sslMode=verify-ca&serverSslCert=/ca.pem", {"check_hostname": False, "ca": "/ca.pem"}),
        ("?sslMode=VERIFY_IDENTITY", {"check_hostname": True}),
        ("?useSsl=true", {"check_hostname": True}),  # Connector/J: verify everything
        ("?useSSL=true", {"check_hostname": True}),
    ],
)
def test_connector_j_ssl_settings_become_pymysql_ones(
    query: str, expected: dict[str, object] | None
) -> None:
    args = mysql_args(JdbcSourceSpec(name="shop", url=f"jdbc:mariadb://db:3307/shop{query}"))
    assert (args["host"], args["port"], args["database"]) == ("db", 3307, "shop")
    assert args["init_command"] == SESSION_SETUP  # set up as the JDBC reader's session
    if expected is None:
        assert "ssl" not in args
        return
    assert {k: args["ssl"][k] for k in expected} == expected
    if args["ssl"]["check_hostname"] or "ca" in expected:
        assert args["ssl"]["verify_mode"] == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "jdbc:postgresql://db/shop",
            "jdbc:postgresql://db/shop?ApplicationName=incremental_assets",
        ),
        (
            "jdbc:mariadb://db/shop?tinyInt1isBit=true",
            "jdbc:mysql://db/shop?tinyInt1isBit=true&permitMysqlScheme=true"
            "&connectionAttributes=program_name:incremental_assets",
        ),
        (
            "jdbc:mysql://db/shop",
            "jdbc:mysql://db/shop?permitMysqlScheme=true&tinyInt1isBit=false"
            "&connectionAttributes=program_name:incremental_assets",
        ),
    ],
)
def test_driver_properties_travel_in_the_url_the_users_own_kept(url: str, expected: str) -> None:
    """Spark Connect lower-cases reader options' names; the drivers read them case-sensitively."""
    source = JdbcSourceSpec(name="shop", url=url)
    assert database_of(source).spark_url(source) == expected


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("orders", ["2025/a.parquet", "2025/b.csv", "top.parquet"]),
        ("orders/*.parquet", ["top.parquet"]),
        ("orders/*/*.parquet", ["2025/a.parquet"]),
        ("orders/202[45]", ["2025/a.parquet", "2025/b.csv"]),
        ("orders/{2024,2025}/*.{parquet,csv}", ["2025/a.parquet", "2025/b.csv"]),
        ("orders/top.parquet", ["top.parquet"]),
        ("missing/*.parquet", []),
    ],
)
def test_a_table_reads_the_files_spark_would(
    tmp_path: Path, table: str, expected: list[str]
) -> None:
    orders = tmp_path / "orders"
    for name in [
        "top.parquet",
        "2025/a.parquet",
        "2025/b.csv",
        "2025/_SUCCESS",
        ".hidden/c.parquet",
    ]:
        (orders / name).parent.mkdir(parents=True, exist_ok=True)
        (orders / name).write_text("x")
    files = source_files(FilesSourceSpec(name="drop", path=str(tmp_path)), table)
    assert sorted(str(Path(f.path).relative_to(orders)) for f in files) == expected
