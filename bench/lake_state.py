"""What a lake table holds after a run, read outside the run's clock.

Iceberg, from the table's current metadata file (read as the package's no-JVM check reads it,
`read_quickly`, where the catalog is a local SQLite file and the metadata local; else through
PyIceberg, `IcebergLake.state`) and its current snapshot's summary: the snapshots kept, the live
data and delete files, the rows and the position deletes; then, from one listing of the table's
location (local folder or bucket), every object there, which includes the files of the older
snapshots kept, and the size of the current metadata file (what every commit rewrites and every
reader parses). Plain Parquet: the files in the table's folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from incremental_assets.lake.files import local_path
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.metadata import read_quickly
from incremental_assets.lake.iceberg.records import TableState
from incremental_assets.lake.table import LakeTable


def table_state(lake: LakeTable) -> dict[str, Any]:
    """The table's state now; `{}` when it doesn't exist yet."""
    if isinstance(lake, IcebergLake):
        return iceberg_state(lake)
    folder = Path(local_path(lake.uri))
    files = [p for p in folder.rglob("*.parquet") if "_staging" not in p.parts]
    return {"data_files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def iceberg_state(lake: IcebergLake) -> dict[str, Any]:
    found = read_quickly(lake.catalog, lake.name)
    state = found if isinstance(found, TableState) else lake.state()
    if state is None:
        return {}
    summary = state.current.summary if state.current is not None else {}
    objects = objects_under(state.location, lake.catalog.pyiceberg)
    return {
        "snapshots": len(state.snapshots),
        "metadata_bytes": objects.get(_key(state.metadata_location), 0),
        "data_files": int(summary.get("total-data-files", 0)),
        "delete_files": int(summary.get("total-delete-files", 0)),
        "records": int(summary.get("total-records", 0)),
        "position_deletes": int(summary.get("total-position-deletes", 0)),
        "objects": len(objects),
        "bytes": sum(objects.values()),
    }


def _key(location: str) -> str:
    """A file's location as `objects_under` names it: its local path, or its bucket and key."""
    parts = urlsplit(location)
    if parts.scheme in ("s3", "s3a"):
        return f"{parts.netloc}/{parts.path.lstrip('/')}"
    return local_path(location)


def objects_under(location: str, properties: dict[str, str]) -> dict[str, int]:
    """Every file (object) under a table's location, and its bytes, named as `_key` names it: a
    local folder, or a prefix of an S3 bucket, listed with the catalog's `s3.*` properties."""
    parts = urlsplit(location)
    if parts.scheme in ("s3", "s3a"):
        return _s3_objects(parts.netloc, parts.path.strip("/") + "/", properties)
    found = {}
    for root, _, names in os.walk(local_path(location)):
        for name in names:
            path = os.path.join(root, name)
            found[path] = os.path.getsize(path)
    return found


def _s3_objects(bucket: str, prefix: str, properties: dict[str, str]) -> dict[str, int]:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=properties.get("s3.endpoint"),
        aws_access_key_id=properties.get("s3.access-key-id"),
        aws_secret_access_key=properties.get("s3.secret-access-key"),
        region_name=properties.get("s3.region"),
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {
        f"{bucket}/{item['Key']}": int(item["Size"])
        for page in pages
        for item in page.get("Contents", [])
    }
