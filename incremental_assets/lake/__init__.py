"""The lake: each table's storage behind one interface (`LakeTable`), in one of two formats.

names.py    the data files' names: which batch or bucket a file holds, and its commit
facts.py    what a run reads about its table once: files, schema, records, identity and head
table.py    the interface every format offers the load and the writers, and the commit record
files.py    a folder of Spark-written Parquet files on any file system pyarrow reaches
journal.py  the plain Parquet format's journaled commit and its roll-forward
lock.py     the writer lock on a POSIX file system
parquet.py  the plain Parquet format
iceberg/    the Iceberg format: tables Spark writes, one snapshot per run (catalog, metadata,
            records, schema, table, commits, maintenance)
"""

from __future__ import annotations

from incremental_assets.config import LakeSpec
from incremental_assets.lake.facts import LakeFacts, LakeHead
from incremental_assets.lake.files import ParquetFolder
from incremental_assets.lake.names import BucketScheme, DataFile
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.lake.table import Commit, LakeFormat, LakeTable

__all__ = [
    "NEW_TABLES",
    "BucketScheme",
    "Commit",
    "DataFile",
    "LakeFacts",
    "LakeHead",
    "LakeTable",
    "format_of",
    "open_lake",
]


def open_lake(spec: LakeSpec, table_name: str, identifier: str | None = None) -> LakeTable:
    """The lake table of `table_name`, in its format (`format_of`); `identifier` names it in an
    Iceberg catalog (the translator's `lake_table_name`)."""
    if format_of(spec, table_name) == "iceberg":
        # Imported here: a plain Parquet lake never loads PyIceberg.
        from incremental_assets.lake.iceberg import IcebergLake

        return IcebergLake(spec, table_name, identifier or f"{spec.namespace}.{table_name}")
    return ParquetLake(spec.table_uri(table_name), table_name)


# The format of a new table when `lake.format` is unset (a plain Parquet table keeps its format).
NEW_TABLES: LakeFormat = "iceberg"


def format_of(spec: LakeSpec, table_name: str) -> LakeFormat:
    """The table's format: the configured one; unset, `NEW_TABLES`, unless the table's folder
    already holds a plain Parquet table and no Iceberg one."""
    if spec.format is not None:
        return spec.format
    if ParquetFolder(spec.table_uri(table_name)).holds_plain_table():
        return "parquet"
    return NEW_TABLES
