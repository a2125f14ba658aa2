"""Fixtures of the Spark-level tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession


@pytest.fixture
def catalog(spark: SparkSession, tmp_path: Path) -> Iterator[str]:
    """An Iceberg catalog on a SQLite file, set at run time as the lake sets its own; unset
    after."""
    name = f"runtime_{tmp_path.name.replace('-', '_')}"
    conf = {
        "": "org.apache.iceberg.spark.SparkCatalog",
        ".type": "jdbc",
        ".uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        ".warehouse": str(tmp_path / "warehouse"),
    }
    for suffix, value in conf.items():
        spark.conf.set(f"spark.sql.catalog.{name}{suffix}", value)
    yield name
    for suffix in conf:
        spark.conf.unset(f"spark.sql.catalog.{name}{suffix}")
