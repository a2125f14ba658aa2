"""Table specs as the configuration gives them, for tests that need one but no project on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from incremental_assets.config import TableSpec, project_from_mapping

_SOURCES = {
    "postgres": {"type": "jdbc", "url": "jdbc:postgresql://db/shop", "user": "u"},
    "files": {"type": "files", "path": "/landing", "format": "parquet"},
}


def table_on(source: Literal["postgres", "files"], **settings: Any) -> TableSpec:
    """The table `orders` (cursor `updated_at`) on a PostgreSQL or a files source; None drops a
    setting."""
    entry = {"name": "orders", "source": "src", "table": "orders", "cursor": "updated_at"}
    entry = {k: v for k, v in {**entry, **settings}.items() if v is not None}
    raw = {"lake": {"path": "/lake"}, "sources": {"src": _SOURCES[source]}, "tables": [entry]}
    return project_from_mapping(raw, Path("/project/incremental_assets.yaml")).tables[0]
