"""The files a files-source table reads, listed as Spark reads them: a folder, a file or a glob."""

from __future__ import annotations

import fnmatch
import hashlib
import re

import pyarrow.fs as pafs

from incremental_assets.config import FilesSourceSpec
from incremental_assets.lake.files import arrow_uri

_GLOB_CHARACTERS = re.compile(r"[*?\[{]")


def source_files(source: FilesSourceSpec, table_path: str) -> list[pafs.FileInfo]:
    """The data files Spark reads for `table:`: a folder (recursively), a file, or a Hadoop glob."""
    path = f"{source.path.rstrip('/')}/{table_path.lstrip('/')}".rstrip("/")
    prefix = _static_prefix(path)
    fs, root = pafs.FileSystem.from_uri(arrow_uri(prefix))
    pattern = path[len(prefix) :].strip("/")
    top = fs.get_file_info(root)
    if top.type == pafs.FileType.File:
        return [top]
    listing = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    patterns = (
        [p.split("/") for p in _expand_braces(pattern.replace("[^", "[!"))] if pattern else [[]]
    )
    return [
        info
        for info in listing
        if info.type == pafs.FileType.File
        and _read_by_spark(info.path[len(root) :].strip("/").split("/"), patterns)
    ]


def _static_prefix(path: str) -> str:
    """The part of a path before its first glob segment."""
    segments = path.split("/")
    for index, segment in enumerate(segments):
        if _GLOB_CHARACTERS.search(segment):
            return "/".join(segments[:index])
    return path


def _read_by_spark(segments: list[str], patterns: list[list[str]]) -> bool:
    """Whether a file (path segments below the static prefix) matches a pattern, as Spark reads it.

    A pattern may match a folder, whose files are then read. Names starting with `_` or `.` are
    skipped, as Spark skips them, unless the pattern spells that first character out.
    """
    for pattern in patterns:
        named = [*pattern, *[""] * (len(segments) - len(pattern))]
        if (
            len(segments) >= len(pattern)
            and all(fnmatch.fnmatchcase(s, p) for s, p in zip(segments, pattern, strict=False))
            and not any(_hidden(s, p) for s, p in zip(segments, named, strict=True))
        ):
            return True
    return False


def _hidden(name: str, pattern: str) -> bool:
    return name.startswith(("_", ".")) and not pattern.startswith(name[0])


def _expand_braces(pattern: str) -> list[str]:
    """Hadoop's `{a,b}` alternatives, which fnmatch doesn't know, as separate patterns."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [e for option in match.group(1).split(",") for e in _expand_braces(head + option + tail)]


def listing_fingerprint(source: FilesSourceSpec, table_path: str) -> str:
    """What identifies the files a read would take: their paths, sizes and modification times."""
    entries = sorted(f"{i.path}|{i.size}|{i.mtime_ns}" for i in source_files(source, table_path))
    digest = hashlib.md5("\n".join(entries).encode(), usedforsecurity=False).hexdigest()
    return f"{len(entries)} files:{digest}"
