"""The metadata a materialization (or a hand-set cursor) records: one typed record, one place.

Every key is a field of `TableMetadata`: the contract keys a run's cursor is read back from
(`cursor`, `cursor_column`, `cursor_type`, `batch`, `dagster/row_count`), what the run did, and a
`cursor set|reset`'s `cursor_action` and `note`. It writes itself as Dagster metadata values and
reads any record back, whatever else the entry holds. The keys are bare, as the README documents
and as every instance has stored them since the first release.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, get_args

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, field_validator

from incremental_assets.config import Mode
from incremental_assets.cursor import CursorType, CursorValue, format_cursor
from incremental_assets.lake import LakeHead
from incremental_assets.results import LoadResult, MergeStrategy, StoredState
from incremental_assets.settings import canonical

# Dagster's standard table keys, which its UI and catalog read. (Dagster's `TableMetadataSet`
# names them too, but 1.13 exports it only from its private modules.)
ROW_COUNT = "dagster/row_count"
URI = "dagster/uri"
TABLE_NAME = "dagster/table_name"
COLUMN_SCHEMA = "dagster/column_schema"

# A source asset's observation (`sensors.py`): the table whose sensor saw it, the source's newest
# cursor (or newest file), the cursor the table's next run reads from, what a run would read now
# (rows past that cursor, or files), and how far the lake is behind (a time cursor: in seconds,
# and as a person reads it, `2 h 5 min`).
OBSERVED_FOR = "table"
NEWEST_CURSOR = "newest_cursor"
NEWEST_FILE = "newest_file_modified"
LAKE_CURSOR = "lake_cursor"
ROWS_WAITING = "rows_waiting"
FILES_WAITING = "files_waiting"
BEHIND_SECONDS = "behind_seconds"
BEHIND = "behind"
# A table captured from the log: the log the slot keeps, and how far the log's end is past the
# position the lake recorded (bytes).
LOG_RETAINED_BYTES = "log_retained_bytes"
LOG_BEHIND_BYTES = "log_behind_bytes"

# Written as a value even when there is none, so "no cursor" reads back as such.
_ALWAYS = ("cursor", "previous_cursor")
# Identifiers, written as text: Dagster plots every number, and these are not quantities.
_IDENTIFIERS = ("batch", "iceberg_snapshot_id")
# What the package reads back, or a reader of a problem wants, but nobody looks at first: one
# JSON entry, after the others.
INTERNALS = "internals"
_INTERNAL = (
    "window_fingerprint",
    "settings",
    "lake_table_id",
    "lake_commit",
    "spark_jobs",
    "spark_stages",
    "buckets_touched",
    "buckets_held",
    "null_cursor_rows",
    "boundary_rows",
    "transaction_cap_applied",
)


class TableMetadata(BaseModel):
    """Every key, in the order the UI shows them: the cursor, the counts and timings, what the
    run did, where the table is; then the internals, in one JSON entry (`INTERNALS`)."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, arbitrary_types_allowed=True
    )

    cursor: str | None = None
    previous_cursor: str | None = None
    cursor_column: str | None = None
    cursor_type: CursorType | Literal[""] | None = None  # "": the table has no cursor
    rows_extracted: int | None = None
    rows_written: int | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    row_count: int | None = Field(None, alias=ROW_COUNT)
    extract_seconds: float | None = None
    write_seconds: float | None = None
    warnings: str | None = None  # markdown, one line per warning
    mode: Mode | None = None
    full_refresh: bool | None = None
    backfill: str | None = None
    batch: int | None = None
    extract_filter: str | None = None
    files_written: int | None = None
    rows_rewritten: int | None = None
    delete_files: int | None = None
    deleted_fraction: float | None = None
    merge_strategy: MergeStrategy | None = None
    schema_change: str | None = None
    deletes_reconciled: bool | None = None
    settings_changed: str | None = None
    transaction_cap: str | None = None
    cursor_capped_at: str | None = None
    maintenance: str | None = None
    # `capture: log` tables: the changes to the table the run read from the log, and in how many
    # transactions; the log the table's slot keeps (bytes), and whether more changes wait past the
    # position the run recorded (it read at most `log_load.CHANGES_PER_RUN`)
    log_changes: int | None = None
    log_transactions: int | None = None
    log_retained_bytes: int | None = None
    log_more_waiting: bool | None = None
    checks_not_run: str | None = None  # the checks left out of the run, and why
    spark: str | None = None
    # `set` or `reset` on a hand-set cursor's observation, `convert` on a lake format conversion's
    cursor_action: Literal["set", "reset", "convert"] | None = None
    note: str | None = None
    uri: str | None = Field(None, alias=URI)
    table_name: str | None = Field(None, alias=TABLE_NAME)
    iceberg_snapshot_id: int | None = None  # the Iceberg snapshot the table was at after the run
    # The table's metadata file after the run, for readers without the catalog (DuckDB).
    iceberg_metadata_location: str | None = None
    column_schema: dg.TableSchema | None = Field(None, alias=COLUMN_SCHEMA)
    # -- the internals (`_INTERNAL`) --
    window_fingerprint: str | None = None
    # The lake-shaping settings the run ran under (`settings.py`), as JSON.
    settings: str | None = None
    # The lake table's identity and its last commit when the run ended: the next run adds to
    # that table, at that commit, or refuses.
    lake_table_id: str | None = None
    lake_commit: str | None = None
    spark_jobs: int | None = None
    spark_stages: int | None = None
    buckets_touched: int | None = None
    buckets_held: int | None = None
    null_cursor_rows: int | None = None
    boundary_rows: int | None = None
    transaction_cap_applied: bool | None = None

    @field_validator("settings", mode="before")
    @classmethod
    def _settings_text(cls, value: object) -> object:
        """Recorded as a JSON object (earlier versions: its text); kept as the text runs
        compare."""
        return canonical(value) if isinstance(value, Mapping) else value

    @field_validator("merge_strategy", mode="before")
    @classmethod
    def _older_wording(cls, value: object) -> object:
        """Earlier versions recorded the strategy as a sentence: read as not recorded."""
        return value if value in get_args(MergeStrategy) else None

    @classmethod
    def extract(cls, metadata: Mapping[str, Any]) -> TableMetadata:
        """The record in a materialization's or observation's metadata (the internals read
        from their JSON entry, or from keys of their own, as earlier versions wrote them)."""
        values = {key: getattr(value, "value", value) for key, value in metadata.items()}
        internals = values.pop(INTERNALS, None)
        if isinstance(internals, Mapping):
            values = {**internals, **values}
        return cls.model_validate(values)

    def as_metadata(self) -> dict[str, dg.MetadataValue]:
        metadata: dict[str, dg.MetadataValue] = {}
        internals: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if name in _INTERNAL:
                if value is not None:
                    internals[name] = json.loads(value) if name == "settings" else value
            elif value is not None or name in _ALWAYS:
                metadata[field.alias or name] = _metadata_value(name, value)
        if internals:
            metadata[INTERNALS] = dg.MetadataValue.json(internals)
        return metadata

    def values(self) -> dict[str, Any]:
        """The record as plain values by key, the internals among them (what tests and scripts
        read): typed as the fields are, the keys that are always written included."""
        found = {
            field.alias or name: getattr(self, name)
            for name, field in type(self).model_fields.items()
            if getattr(self, name) is not None
        }
        return {**{name: None for name in _ALWAYS}, **found}

    def stored_state(self, run_id: str | None) -> StoredState:
        return StoredState(
            cursor=self.cursor,
            cursor_column=self.cursor_column,
            cursor_type=self.cursor_type or None,
            batch=self.batch or 0,
            run_id=run_id,
            row_count=self.row_count,
            window_fingerprint=self.window_fingerprint,
            lake_table_id=self.lake_table_id,
            lake_commit=self.lake_commit,
            settings=self.settings,
            columns=(
                tuple((c.name, c.type) for c in self.column_schema.columns)
                if self.column_schema is not None
                else None
            ),
        )


def _metadata_value(name: str, value: Any) -> dg.MetadataValue:
    if value is None:
        return dg.MetadataValue.null()
    if name in _IDENTIFIERS:
        return dg.MetadataValue.text(str(value))
    if name == "warnings":
        return dg.MetadataValue.md(value)
    if isinstance(value, dg.TableSchema):
        return dg.MetadataValue.table_schema(value)
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    return dg.MetadataValue.text(str(value))  # text, or the value of an enum (mode, cursor type)


def _text(cursor_type: CursorType | None, value: CursorValue | None) -> str | None:
    return None if value is None or cursor_type is None else format_cursor(cursor_type, value)


# The fields of a `LoadResult` (with its `Report` and `WriteOutcome`) recorded under other keys,
# and those not recorded, with why: every other field is a `TableMetadata` field of its name,
# recorded as it is. A test holds every field of the three records to one of the three.
RECORDED_AS = {
    "merge": ("rows_inserted", "rows_updated", "rows_deleted"),
    "columns": (COLUMN_SCHEMA,),
    "head": ("lake_table_id", "lake_commit", "iceberg_snapshot_id", "iceberg_metadata_location"),
    "merge_path": ("merge_strategy", "buckets_touched", "buckets_held"),
    "report": (),  # its own fields, each recorded by name
    "written": (),  # the write's, likewise
    "rows_held": (ROW_COUNT,),  # the write's count, or the lake's (`LoadResult.row_count`)
}
NOT_RECORDED = {
    "files": "the data files a plain run added: read back by the key check, not shown",
    "primary_key": "the key the run matched on: the key check's own metadata",
    "duplicate_keys": "the key check's result: its own metadata",
}


def metadata_for(
    result: LoadResult, checks_not_run: str | None = None
) -> dict[str, dg.MetadataValue]:
    """The materialization metadata for one load. The key names are a public contract."""
    kind, written = result.cursor_type, result.written
    merge, path = written.merge, written.merge_path
    record = TableMetadata(
        cursor=_text(kind, result.cursor),
        previous_cursor=_text(kind, result.previous_cursor),
        cursor_column=result.cursor_column or "",
        cursor_type=kind or "",
        mode=result.mode,
        full_refresh=result.full_refresh,
        batch=result.batch,
        rows_inserted=merge.inserted if merge else None,
        rows_updated=merge.updated if merge else None,
        rows_deleted=merge.deleted if merge else None,
        extract_filter=result.extract_filter,
        extract_seconds=round(result.extract_seconds, 3),
        write_seconds=round(result.write_seconds, 3),
        warnings="\n".join(f"- {w}" for w in result.warnings) or None,
        row_count=result.row_count,
        uri=result.uri,
        column_schema=dg.TableSchema(
            columns=[dg.TableColumn(name=name, type=type_) for name, type_ in written.columns]
        ),
        settings=result.settings,
        lake_table_id=result.head.table_id if result.head else None,
        lake_commit=result.head.txn if result.head else None,
        checks_not_run=checks_not_run,
        iceberg_snapshot_id=result.head.snapshot_id if result.head else None,
        iceberg_metadata_location=result.head.metadata_location if result.head else None,
        table_name=result.table_name,
        merge_strategy=path.strategy if path else None,
        buckets_touched=path.buckets_touched if path else None,
        buckets_held=path.buckets_held if path else None,
        **_by_name(result.report),
        **_by_name(written),
    )
    return record.as_metadata()


def _by_name(values: object) -> dict[str, object]:
    """The fields of `values` that are keys of their own name."""
    found = vars(values)
    unknown = set(found) - set(TableMetadata.model_fields) - set(RECORDED_AS) - set(NOT_RECORDED)
    assert not unknown, f"fields with no metadata key: {unknown}"
    return {k: v for k, v in found.items() if k in TableMetadata.model_fields}


def override_metadata(
    previous: StoredState,
    cursor: str | None,
    cursor_column: str | None,
    cursor_type: CursorType | None,
    note: str,
    converted: LakeHead | None = None,
) -> dict[str, dg.MetadataValue]:
    """A hand-set cursor (None: the next run extracts everything), carried forward from `previous`;
    or, with `converted`, the same cursor over the lake table a conversion made."""
    action = "convert" if converted is not None else "set" if cursor is not None else "reset"
    head_id = converted.table_id if converted is not None else previous.lake_table_id
    head_commit = converted.txn if converted is not None else previous.lake_commit
    record = TableMetadata(
        cursor=cursor,
        previous_cursor=previous.cursor,
        cursor_column=cursor_column or "",
        cursor_type=cursor_type or "",
        batch=previous.batch,
        cursor_action=action,
        note=note,
        row_count=previous.row_count,
        settings=previous.settings,
        lake_table_id=head_id,
        lake_commit=head_commit,
        iceberg_snapshot_id=converted.snapshot_id if converted is not None else None,
    )
    return record.as_metadata()


def state_after(result: LoadResult, run_id: str | None = None) -> StoredState:
    """The state the next run starts from once `result` is recorded, read back exactly as it
    would be from the instance: for callers that chain loads outside Dagster."""
    return TableMetadata.extract(metadata_for(result)).stored_state(run_id)
