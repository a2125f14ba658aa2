"""The Iceberg lake: Apache Iceberg tables written by Spark, read by PyIceberg and any engine.

catalog.py   the lake's catalog, as PyIceberg and Spark each configure it; secrets redacted
metadata.py  a table's metadata read from its catalog (PyIceberg, or the standard library)
records.py   what the metadata says of this package's commits: the head, the records
schema.py    Iceberg's types and Spark's
table.py     the lake table (`LakeTable`): facts, lock, counts
properties.py  the table properties a run sets, and the one rule of the format version
commit_plan.py what a run's commit will do, and what became of it: values, pure
conflicts.py   why a commit was refused, read from the metadata
branch.py    what a write sees of its commit: the run's branch, its rows
commits.py   the executor of a plan: the run's snapshots on its own branch, then main moved
partitions.py  how a merge table is partitioned by its key
maintenance.py what housekeeping is due, and Iceberg's procedures that do it
"""

from incremental_assets.lake.iceberg.table import IcebergLake

__all__ = ["IcebergLake"]
