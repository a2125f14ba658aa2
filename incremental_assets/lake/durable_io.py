"""PyIceberg's FileIO for a local lake, with every file it writes flushed to disk on close.

A commit writes its manifests, its manifest list and the table's new metadata file, then asks the
catalog to point at that metadata file; PyIceberg syncs none of them. After a power cut the
catalog (SQLite's commit is durable) could name a metadata file that is empty or missing, behind
a cursor the Dagster instance already recorded. Through this FileIO each file, and the folder
entry that names it, is on disk before PyIceberg closes it, so the catalog only ever names files
that survive. (The data files are synced by the commit itself: `ParquetFolder.sync_staged`.)
"""

from __future__ import annotations

import os
from types import TracebackType

from pyiceberg.io import InputFile, OutputFile, OutputStream
from pyiceberg.io.fsspec import FsspecFileIO

from incremental_assets.lake.files import fsync_path, local_path


class DurableFileIO(FsspecFileIO):
    def new_output(self, location: str) -> OutputFile:  # type: ignore[override]
        return _DurableOutputFile(super().new_output(location))


class _DurableOutputFile(OutputFile):
    def __init__(self, inner: OutputFile) -> None:
        super().__init__(inner.location)
        self._inner = inner

    def __len__(self) -> int:
        return len(self._inner)

    def exists(self) -> bool:
        return self._inner.exists()

    def to_input_file(self) -> InputFile:
        return self._inner.to_input_file()

    def create(self, overwrite: bool = False) -> OutputStream:
        return _DurableStream(self._inner.create(overwrite), local_path(self.location))


class _DurableStream(OutputStream):
    def __init__(self, inner: OutputStream, path: str) -> None:
        self._inner = inner
        self._path = path

    def write(self, b: bytes) -> int:
        return self._inner.write(b)

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        self._inner.close()
        fsync_path(self._path)
        fsync_path(os.path.dirname(self._path))

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(
        self,
        exctype: type[BaseException] | None,
        excinst: BaseException | None,
        exctb: TracebackType | None,
    ) -> None:
        self.close()
