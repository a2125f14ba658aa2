"""The Iceberg lake: Apache Iceberg tables written by Spark, read by PyIceberg and any engine.

catalog.py   the lake's catalog, as PyIceberg and Spark each configure it; secrets redacted
metadata.py  a table's metadata read from its catalog (PyIceberg, or the standard library)
records.py   what the metadata says of this package's commits: the head, the records
schema.py    Iceberg's types and Spark's
table.py     the lake table (`LakeTable`): facts, lock, counts
properties.py  the table properties a run sets, and the one rule of the format version
commits.py   one run's commit: a snapshot on its own branch, then main moved to it
"""

from incremental_assets.lake.iceberg.table import IcebergLake

__all__ = ["IcebergLake"]
