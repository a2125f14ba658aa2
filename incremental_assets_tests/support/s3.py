"""A real S3 API for the object-store tests: moto's server, on a free 127.0.0.1 port.

moto is a functional S3 (the objects, listings and errors of the API), not a model of S3's
timing or consistency: the tests use it for what a lake on an object store must do, and the
benchmark for the absence of steps that grow with the number of files, not for speed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from incremental_assets_tests.support.postgres import free_port

REGION = "us-east-1"
KEY, SECRET = "testing-key", "testing-secret"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def catalog(self, **catalog: Any) -> dict[str, Any]:
        """`lake.catalog` for a lake in a bucket of this server: its S3 settings, which
        PyIceberg and Iceberg's S3FileIO both take, beside the catalog's own."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": KEY,
            "s3.secret-access-key": SECRET,
            "s3.region": REGION,
            "s3.path-style-access": "true",
            **catalog,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def bucket(self, name: str) -> str:
        """A new bucket: `s3://<name>`."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@contextmanager
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()
