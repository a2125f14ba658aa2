"""The lake's settings (`lake:`): where its tables are, in which format, through which catalog,
how merges write and how tables are kept (snapshots, maintenance)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from incremental_assets.config.fields import Cron, Duration, FrozenModel, OptionText, absolute

# How a merge writes the rows it changes in an Iceberg table: delete files in format v2 (every
# reader reads them), deletion vectors in format v3, or the changed data files rewritten.
MergeWrites = Literal["position_deletes", "deletion_vectors", "copy_on_write"]


class MergeTuning(FrozenModel):
    """How a plain Parquet merge chooses between patching each bucket it touches in a job of its
    own and ranking them all in one shuffle (`writers/merge_path.py`). Advanced: the defaults
    suit most tables; the Iceberg format merges row by row and ignores these."""

    patch_rows: int = Field(
        2_000_000, gt=0, description="Patch only deltas of at most this many rows."
    )
    patch_buckets: int = Field(256, gt=0, description="Patch at most this many touched buckets.")
    patch_min_bytes: int = Field(
        64 << 20,
        ge=0,
        description="Patch only when the touched buckets' files hold at least this many bytes: "
        "below it, one shuffle of them all costs less than a job per bucket.",
    )
    patch_jobs: int = Field(4, gt=0, description="Buckets patched at the same time.")
    most_buckets: float = Field(
        0.75,
        gt=0,
        le=1,
        description="A merge touching at least this share of the buckets rewrites the table.",
    )
    reread_check_rows: int = Field(
        100_000,
        ge=0,
        description="Up to this many re-read rows are compared with the lake before they mark "
        "their buckets touched; more mark them touched.",
    )


class LakeSpec(FrozenModel):
    path: str = Field(
        description="Root of the lake: a local path or a Hadoop URI. Each table is the folder "
        "<path>/<table name>."
    )
    format: Literal["parquet", "iceberg"] | None = Field(
        None,
        description="How a table's files are committed: iceberg (one snapshot per run, through "
        "the Iceberg catalog) or parquet (a folder and a journal). Unset: iceberg for a new "
        "table, parquet for a table the folder already holds in plain Parquet.",
    )
    catalog: dict[str, OptionText] = Field(
        default_factory=dict,
        description="Iceberg: the PyIceberg catalog's properties (type, uri, ...). By default a "
        "SQL catalog on SQLite at <path>/_catalog.db.",
    )
    namespace: str = Field(
        "incremental_assets", description="Iceberg: the namespace the tables are created in."
    )
    keep_snapshots: int = Field(
        100,
        gt=0,
        description="Iceberg: snapshots kept for time travel, at least; a snapshot expires (and "
        "the files only it held are deleted) once this many newer ones exist and it is older "
        "than keep_snapshots_for.",
    )
    keep_snapshots_for: Duration = Field(
        timedelta(days=1),
        description="Iceberg: no snapshot younger than this expires, so a reader's snapshot or "
        "a recorded iceberg_snapshot_id stays readable at least this long.",
    )
    lock: bool = Field(
        True,
        description="Take the table's file lock (<table>/_lock) on a POSIX file system; it does "
        "nothing on object stores.",
    )
    compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = "zstd"
    max_rows_per_file: int = Field(5_000_000, gt=0)
    lock_timeout: Duration = Field(
        timedelta(minutes=10), description="How long a second run waits for the table lock."
    )
    maintenance: Literal["after_commit", "scheduled", "off"] = Field(
        "after_commit",
        description="Iceberg: when the tables' maintenance (compaction, snapshot expiry, orphan "
        "files) runs: after_commit (after a run's commit, when due), scheduled (a job of its own "
        "on maintenance_schedule, in each table's pool), or off (another engine keeps the "
        "tables).",
    )
    maintenance_schedule: Cron = Field(
        "0 3 * * *", description="Iceberg, with maintenance: scheduled: the job's cron (UTC)."
    )
    merge_writes: MergeWrites = Field(
        "position_deletes",
        description="Iceberg merge tables: position_deletes (format v2: delete files every "
        "reader reads), deletion_vectors (format v3: one vector per data file; fewer readers) "
        "or copy_on_write (the changed data files rewritten, no deletes). A table's own "
        "merge_writes overrides it.",
    )
    merge_tuning: MergeTuning = Field(
        default_factory=MergeTuning,
        description="Plain Parquet merges: when to patch buckets and when to rank them.",
    )

    @field_validator("path")
    @classmethod
    def _resolved(cls, value: str, info: ValidationInfo) -> str:
        return absolute(value, info)

    @model_validator(mode="after")
    def _catalog_where_sqlite_can_be(self) -> LakeSpec:
        if self.format != "parquet" and not self.catalog and "://" in self.path:
            raise ValueError(
                f"an Iceberg lake at {self.path} needs `catalog:` (the default SQLite file only "
                "works on a local path): for example {type: rest, uri: https://...} or "
                "{type: sql, uri: postgresql+psycopg2://...}; or set format: parquet"
            )
        return self

    @property
    def uri(self) -> str:
        return self.path

    @property
    def codec(self) -> str:
        """The compression as Spark's Parquet writer names it."""
        return "uncompressed" if self.compression == "none" else self.compression

    def table_uri(self, table_name: str) -> str:
        return f"{self.uri.rstrip('/')}/{table_name}"
