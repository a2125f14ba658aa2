"""The probes' pure parts: JDBC URLs in libpq's terms, and which files a glob table reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from incremental_assets.config import FilesSourceSpec, JdbcSourceSpec
from incremental_assets.sources.listing import source_files
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
