"""The table one example drives: its drawn configuration, and what its cursor values are.

A `TableConfig` is drawn once per example and printed in the failing recipe, so it says everything
that shapes the run: the mode, the key, the cursor's type and the options that move the window.
Cursor values are plain Python values (int, Decimal, str, date, datetime). Text cursors are
zero-padded ASCII, ordered alike by every PostgreSQL collation; on MariaDB they are also spelled in
upper and lower case and with trailing spaces, which its default collations ignore (`collated`).
Types are named by their PostgreSQL spelling; each source spells them in its own database.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

TABLE = "t"
CURSOR = "cur"
DELETED = "deleted"

# int, Decimal, str, date or datetime: one type per table, so values compare; Any says that
# where a union can't.
CursorValue = Any

# Cursor type in PostgreSQL -> the type named in the config.
CURSOR_TYPES = {
    "bigint": "integer",
    "numeric(12,2)": "decimal",
    "text": "string",
    "date": "date",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
}
TIME_CURSORS = ("timestamp", "timestamptz")
# A narrow and a wide lookback per cursor type, in the config's own notation.
LOOKBACKS = {
    "bigint": ("1", "1000"),
    "numeric(12,2)": ("0.25", "100"),
    "date": ("1d", "400d"),
    "timestamp": ("1s", "1h"),
    "timestamptz": ("1s", "1h"),
}
SAFETY_LAGS = ("1s", "2s")
# How an Iceberg merge table's merges write the rows they change (`merge_writes`); the first is
# the default. deletion_vectors makes the table format v3, which no setting takes back.
MERGE_WRITES = ("position_deletes", "deletion_vectors", "copy_on_write")
# Where `merge_writes` is set: on the table, or on the lake (which every table inherits).
MERGE_WRITES_ON = ("table", "lake")
# `timestamp` keys include wall-clock values in the hour Europe/Paris skips in spring: a JVM in a
# zone with daylight saving time must not shift them (the soak runs its JVM in that zone).
# `bigint` keys are sparse 64-bit ids (`sparse_id`): snowflake-like values near 7e18, some
# negative, one far outlier and the largest bigint, so their range spans almost 2^64.
KEY_TYPES = ("integer", "numeric(12,0)", "text", "timestamp", "bigint")
# The primary keys a keyed table's source may have: every keyed table has `id` and `k2`, unique
# together; `id` alone is unique only where the table was drawn with a single-column key
# (`TableConfig.paired` false). `recreate_key` moves the source's key among these.
KEY_SHAPES = (("id",), ("id", "k2"), ("k2", "id"))


DATABASES = ("postgres", "mariadb", "files")  # files: a folder of Parquet files


@dataclass(frozen=True)
class TableConfig:
    """One source table and how it is loaded."""

    database: str  # postgres | mariadb | files
    mode: str  # append | merge | full_refresh
    # The source table's primary key, in its order: () is keyless (append only); else one of
    # KEY_SHAPES (drawn ("id",) or ("id", "k2"); `recreate_key` changes it).
    key: tuple[str, ...]
    key_type: str  # PostgreSQL type of `id`: one of KEY_TYPES
    cursor_type: str  # a key of CURSOR_TYPES
    lookback: str | None = None
    safety_lag: str | None = None
    reconcile: bool = False  # deletes: reconcile (merge)
    soft_deletes: bool = False  # delete_column: deleted (merge)
    small_buckets: bool = False  # merge: 2 hash buckets / ranges of 4 keys, so buckets interact
    # What the machine changes between runs (the mode and the options above included):
    key_named: str = "as drawn"  # primary_key in the config: as drawn, reversed, or unnamed
    exclude: tuple[str, ...] = ()  # exclude_columns
    listed: tuple[str, ...] | None = None  # columns: the columns read (None: every one)
    # Iceberg merge tables: `merge_writes` (None: unset, the default) and where it is set.
    merge_writes: str | None = None
    merge_writes_on: str = "table"  # one of MERGE_WRITES_ON
    # Keyed tables: whether ids come in pairs told apart by `k2` (drawn with the key ("id", "k2"),
    # so `id` alone is never unique); else every row has its own id, and k2 is a value column
    # until a recreated key takes it in.
    paired: bool = False
    # PostgreSQL: whether the table holds the non-scalar columns (arrays, composites; the
    # source's `SHAPES`). Drawn true unless the run leaves them out.
    shapes: bool = True

    @property
    def keyed(self) -> bool:
        return bool(self.key)

    def key_shapes(self) -> tuple[tuple[str, ...], ...]:
        """The primary keys this table's rows are unique under."""
        if not self.keyed:
            return ()
        return tuple(shape for shape in KEY_SHAPES if not (self.paired and shape == ("id",)))

    @property
    def time_cursor(self) -> bool:
        return self.cursor_type in TIME_CURSORS

    @property
    def writes(self) -> str:
        """How merges write changed rows, as the config resolves `merge_writes`."""
        return self.merge_writes or MERGE_WRITES[0]

    @property
    def late_commits(self) -> bool:
        """Where the README promises rows committed late are not lost: the cap or a lookback."""
        return self.time_cursor or self.lookback is not None

    def table_entry(self, schema: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": TABLE,
            "source": "db",
            "table": f"{schema}.{TABLE}",
            "mode": self.mode,
            "cursor": {"column": CURSOR, "type": CURSOR_TYPES[self.cursor_type]},
        }
        if self.key and self.key_named != "unnamed":  # unnamed: merge reads the table's own
            entry["primary_key"] = list(
                self.key[::-1] if self.key_named == "reversed" else self.key
            )
        if self.lookback is not None:
            entry["lookback"] = self.lookback
        if self.safety_lag is not None:
            entry["safety_lag"] = self.safety_lag
        if self.reconcile:
            entry["deletes"] = "reconcile"
        if self.soft_deletes:
            entry["delete_column"] = DELETED
        if self.small_buckets:
            entry["buckets"] = 2
            entry["bucket_rows"] = 4
        if self.exclude:
            entry["exclude_columns"] = list(self.exclude)
        if self.listed is not None:
            entry["columns"] = list(self.listed)
        if self.merge_writes is not None and self.merge_writes_on == "table":
            entry["merge_writes"] = self.merge_writes
        return entry

    def lake_entry(self) -> dict[str, Any]:
        """The `lake:` settings this config states (besides the lake's path and format)."""
        if self.merge_writes is not None and self.merge_writes_on == "lake":
            return {"merge_writes": self.merge_writes}
        return {}

    def lake_settings(self) -> dict[str, Any]:
        """The lake-shaping settings this config states, by the names the product records them
        under (its `settings_changed` metadata); the lake's path and format are the runner's.
        A merge table's also name how merges write and how the table is partitioned."""
        entry = self.table_entry("")
        names = ("mode", "primary_key", "delete_column", "deletes", "columns", "exclude_columns")
        settings = {name: entry.get(name) for name in names}
        if self.mode == "merge":
            settings |= {
                "merge_writes": self.writes,
                "buckets": entry.get("buckets"),
                "bucket_rows": entry.get("bucket_rows"),
            }
        return settings

    def visible(self, columns: list[str]) -> list[str]:
        """The source columns a run reads: `columns:` (with the key, the cursor and the delete
        column it needs) or every column but `exclude_columns:`."""
        if self.listed is None:
            return [c for c in columns if c not in self.exclude]
        needed = {*self.key, CURSOR, *([DELETED] if self.soft_deletes else [])}
        return [c for c in columns if c in self.listed or c in needed]


@st.composite
def table_configs(
    draw: st.DrawFn,
    modes: tuple[str, ...],
    database: str = "postgres",
    cursor_types: tuple[str, ...] = tuple(CURSOR_TYPES),
    key_types: tuple[str, ...] = KEY_TYPES,
    merge_writes: tuple[str, ...] = (),
    shapes: bool = True,
) -> TableConfig:
    """A table's configuration; `merge_writes`: the values to draw it from for a merge table
    (none: left unset), drawn last so that the other draws stay as they were; `shapes`: whether
    it holds the source's non-scalar columns."""
    mode = draw(st.sampled_from(modes))
    keyed = mode != "append" or draw(st.booleans())
    key: tuple[str, ...] = ()
    if keyed:
        key = draw(st.sampled_from([("id",), ("id",), ("id", "k2")]))
    cursor_type = draw(st.sampled_from(cursor_types))
    lookback = None
    if cursor_type in LOOKBACKS and draw(st.booleans()):
        lookback = draw(st.sampled_from(LOOKBACKS[cursor_type]))
    safety_lag = None
    if cursor_type in TIME_CURSORS and draw(st.integers(0, 3)) == 0:
        safety_lag = draw(st.sampled_from(SAFETY_LAGS))
    merge = mode == "merge"
    config = TableConfig(
        database=database,
        mode=mode,
        key=key,
        paired=len(key) > 1,
        shapes=shapes,
        key_type=draw(st.sampled_from(key_types)) if keyed else "",
        cursor_type=cursor_type,
        lookback=lookback,
        safety_lag=safety_lag,
        reconcile=merge and draw(st.booleans()),
        soft_deletes=merge and draw(st.booleans()),
        small_buckets=merge and draw(st.booleans()),
    )
    if merge and merge_writes:
        writes = draw(st.sampled_from((None, *merge_writes)))
        on = draw(st.sampled_from(MERGE_WRITES_ON)) if writes is not None else "table"
        config = replace(config, merge_writes=writes, merge_writes_on=on)
    return config


# The first value of each explicit cursor, and one step up from the frontier.
_FIRST: dict[str, CursorValue] = {
    "bigint": 100,
    "numeric(12,2)": Decimal("100.00"),
    "text": "c000000100",
    "date": date(2020, 1, 1),
}


def next_cursor(cursor_type: str, frontier: CursorValue | None, bump: int) -> CursorValue:
    """`bump` steps above the frontier (0: a tie with it) for the explicit cursor types."""
    if frontier is None:
        return _FIRST[cursor_type]
    if cursor_type == "bigint":
        assert isinstance(frontier, int)
        return frontier + bump
    if cursor_type == "numeric(12,2)":
        assert isinstance(frontier, Decimal)
        return frontier + Decimal("0.25") * bump
    if cursor_type == "text":
        assert isinstance(frontier, str)  # possibly respelled: C000000101 and c000000101 alike
        return f"c{int(frontier.rstrip(' ')[1:]) + bump:09d}"
    if cursor_type == "date":
        assert isinstance(frontier, date)
        return frontier + timedelta(days=bump)
    raise ValueError(f"{cursor_type} cursors are assigned by the database clock")


def collated(config: TableConfig, value: Any) -> Any:
    """A value as the source database compares it: equal values compare equal, in its order.

    MariaDB's default collation (latin1_swedish_ci; utf8mb4_general_ci alike) ignores case and
    trailing spaces: 'c1' = 'C1' = 'c1 '. For the ASCII letters and digits the machine writes, its
    order is that of the upper-cased, right-trimmed text (`test_model.py` checks this against the
    server). Everything else compares as Python compares it, as PostgreSQL does.
    """
    if config.database == "mariadb" and isinstance(value, str):
        return value.rstrip(" ").upper()
    return value


def frozen(value: Any) -> Any:
    """A column's value as the model holds it, hashable and compared by value: an array as a
    tuple, a struct (and a map, given as a dict) as its items sorted by name, all the way down;
    so two maps with the same entries in another order are equal."""
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((k, frozen(v)) for k, v in value.items()), key=repr))
    return value


def parse_recorded(cursor_type: str, text: str | None) -> CursorValue | None:
    """The `cursor` metadata text as a value (our own reading, independent of the product's)."""
    if text is None:
        return None
    if cursor_type == "bigint":
        return int(text)
    if cursor_type == "numeric(12,2)":
        return Decimal(text)
    if cursor_type == "text":
        return text
    if cursor_type == "date":
        return date.fromisoformat(text)
    value = datetime.fromisoformat(text)
    if cursor_type == "timestamptz":
        assert value.tzinfo is not None, f"a timestamptz cursor without an offset: {text}"
        return value.astimezone(UTC)
    assert value.tzinfo is None, f"a timestamp cursor with an offset: {text}"
    return value


def cursor_text(cursor_type: str, value: CursorValue) -> str:
    """A value as `incremental-assets cursor set` takes it."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    return str(value)


def minus_lookback(config: TableConfig, value: CursorValue) -> CursorValue:
    """`value - lookback`, as the README defines it (dates round the lookback up to whole days)."""
    lookback = config.lookback
    assert lookback is not None
    if isinstance(value, datetime):
        return value - _duration(lookback)
    if isinstance(value, date):
        days = -(-_duration(lookback) // timedelta(days=1))
        return value - timedelta(days=days)
    if isinstance(value, int):
        return value - int(lookback)
    assert isinstance(value, Decimal)
    return value - Decimal(lookback)


def lag(config: TableConfig) -> timedelta:
    return _duration(config.safety_lag) if config.safety_lag else timedelta(0)


def _duration(text: str) -> timedelta:
    units = {"s": timedelta(seconds=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
    return int(text[:-1]) * units[text[-1]]
