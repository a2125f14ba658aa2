"""`incremental-assets validate --connect`: each table checked against its source without Spark,
on PostgreSQL, MariaDB and a folder of files, run in-process as users run the command."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.cli import main as cli
from incremental_assets_tests.support.cli import cli_env, write_cli_config
from incremental_assets_tests.support.databases import SourceDb

UNUSABLE = "column 'price' is double, which can't serve as an exact cursor."


def _validate(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str], str]:
    """The exit status, the line of each table by name, and stderr."""
    status = cli(["--config", str(config), "validate", "--connect"])
    out, err = capsys.readouterr()
    lines = out.split("against the sources, without Spark:\n", 1)[1].splitlines()
    by_table = {line.split("'")[1]: line.strip() for line in lines}
    return status, by_table, err


def _table(name: str, table: str, cursor: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "source": "shop", "table": table, "cursor": cursor, **settings}


def test_each_table_is_checked_against_its_database(
    db: SourceDb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, updated_at {tstz}, price double precision)"
    )
    orders = db.qualified("orders")
    config = write_cli_config(
        tmp_path,
        {"shop": db.source()},
        [
            _table("orders", orders, "updated_at", primary_key=["id"]),
            _table("typo", orders, "updatd_at", primary_key=["idd"]),
            _table("priced", orders, "price"),
            _table("missing", db.qualified("ordres"), "updated_at"),
        ],
    )

    status, lines, err = _validate(config, capsys)

    assert status == 1
    assert lines["orders"] == (
        f"Table 'orders': ok ({orders}, cursor updated_at (timestamptz), key id)"
    )
    assert "field 'cursor': column 'updatd_at' is not in" in lines["typo"]
    assert "did you mean `updated_at`? Fix: correct the column name." in lines["typo"]
    assert "field 'primary_key': column 'idd' is not in" in lines["typo"]
    assert "did you mean `id`?" in lines["typo"]
    assert f"Table 'priced', field 'cursor': {UNUSABLE}" in lines["priced"]
    assert "Table 'missing' (source 'shop', jdbc:" in lines["missing"]
    assert (
        "Fix: `table:` of table 'missing' names a table the database doesn't have"
        in (lines["missing"])
    )
    assert "3 of 4 tables can't be loaded as configured: typo, priced, missing" in err


def _landing(tmp_path: Path) -> Path:
    events = tmp_path / "landing" / "events"
    events.mkdir(parents=True)
    at = pa.array([datetime(2025, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"id": [1, 2], "at": at, "price": [1.5, 2.5]}), events / "a.parquet")
    (tmp_path / "landing" / "lines").mkdir()
    (tmp_path / "landing" / "lines" / "a.csv").write_text("id,at\n1,2025-01-01\n")
    return tmp_path / "landing"


def _files_config(tmp_path: Path) -> Path:
    tables = [
        _table("events", "events", "at", primary_key=["id"]),
        _table("typo", "events", "att"),
        _table("priced", "events", "price"),
        _table("missing", "evnts", "at"),
        _table("lines", "lines", "at", source="drop"),
    ]
    landing = str(_landing(tmp_path))
    sources = {
        "shop": {"type": "files", "path": landing},
        "drop": {"type": "files", "path": landing, "format": "csv"},
    }
    return write_cli_config(tmp_path, sources, tables)


def test_each_table_is_checked_against_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = _validate(_files_config(tmp_path), capsys)

    landing = tmp_path / "landing"
    assert status == 1
    assert lines["events"] == (
        f"Table 'events': ok (1 file at {landing}/events, cursor at (timestamptz), key id)"
    )
    assert lines["typo"] == (
        "Table 'typo', field 'cursor': column 'att' is not in events; did you mean `at`? "
        "Fix: correct the column name."
    )
    assert lines["priced"].startswith(f"Table 'priced', field 'cursor': {UNUSABLE}")
    assert lines["missing"] == (
        f"Table 'missing', field 'table': there are no parquet files at {landing}/evnts; did "
        f"you mean `events`? Fix: name a folder, a file or a glob under the source's path "
        f"({landing})."
    )
    assert lines["lines"] == (  # a csv file's columns are Spark's to read
        f"Table 'lines': ok (1 file at {landing}/lines; columns not checked: Spark reads csv)"
    )
    assert "3 of 5 tables can't be loaded as configured: typo, priced, missing" in err


def test_no_jvm_is_started(tmp_path: Path) -> None:
    """Where a JVM can't start, the check works all the same."""
    config = _files_config(tmp_path)
    env = cli_env(config, None, JAVA_HOME=str(tmp_path / "no-java"))

    done = subprocess.run(
        [sys.executable, "-m", "incremental_assets", "validate", "--connect"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1, done.stderr[-2000:]
    assert "Table 'events': ok (1 file at" in done.stdout
    assert "Traceback" not in done.stderr


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("scheme", ["postgresql", "mariadb"])
def test_an_unreachable_database_is_one_paragraph_naming_the_fix_without_secrets(
    scheme: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"jdbc:{scheme}://127.0.0.1:{_closed_port()}/shop?password=s3cret&connectTimeout=2000"
    source = {"type": "jdbc", "url": url, "user": "app", "password": "hunter2"}
    tables = [_table("orders", "shop.orders", "at"), _table("lines", "shop.lines", "at")]
    config = write_cli_config(tmp_path, {"shop": source}, tables)

    status, lines, err = _validate(config, capsys)

    assert status == 1
    redacted = url.split("?")[0]
    for name in ("orders", "lines"):
        assert lines[name].startswith(
            f"Table '{name}' (source 'shop', {redacted}): connecting to the source failed: "
        )
        assert lines[name].endswith(
            "Fix: check that the database is running and reachable, and that host and port in "
            "source 'shop' url are right."
        )
    output = "\n".join(lines.values()) + err
    assert "s3cret" not in output and "hunter2" not in output
