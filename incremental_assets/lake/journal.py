"""The plain Parquet lake's commit: a journal, rolled forward until it is done.

    fsync the staged files -> write the journal -> write the records -> rename the staged files
    into place -> fsync the folder -> remove the replaced files -> fsync -> drop staging and journal

If the process dies or fails part way, the journal and its staged files stay, and the next run
rolls every journal forward before anything else (finished steps are skipped). A journal whose
staged file is missing, and was never moved into place, is refused rather than half applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from incremental_assets.errors import WriteError
from incremental_assets.lake.facts import SNAPSHOT
from incremental_assets.lake.files import STAGING, ParquetFolder
from incremental_assets.pause_points import pause_point

JOURNAL = "_journal"


def journal_path(folder: ParquetFolder, txn: str) -> str:
    return folder.join(JOURNAL, f"{txn}.json")


def commit_journaled(
    folder: ParquetFolder,
    txn: str,
    adds: list[tuple[str, str]],
    removes: list[str],
    records: Mapping[str, Any],
) -> None:
    """Add staged files (path under `_staging/<txn>/`, final name), remove replaced ones, write
    the records: all or nothing, once the journal is written."""
    journal = {"txn": txn, "adds": adds, "removes": removes, "records": dict(records)}
    folder.sync_staged(txn, [staged for staged, _ in adds])
    folder.fs.create_dir(folder.join(JOURNAL), recursive=True)
    folder.write_durably(journal_path(folder, txn), json.dumps(journal).encode())
    _apply(folder, journal)


def roll_forward(folder: ParquetFolder) -> list[str]:
    """Finish the commits a dead run journaled; name them."""
    done = []
    selector = pafs.FileSelector(folder.join(JOURNAL), allow_not_found=True)
    for info in folder.fs.get_file_info(selector):
        if info.base_name.endswith(".json"):
            with folder.fs.open_input_stream(info.path) as stream:
                journal = json.loads(stream.read())
            _check_adds_present(folder, journal)
            _apply(folder, journal)
            done.append(f"rolled forward commit {journal['txn']}")
        else:
            folder.fs.delete_file(info.path)
    return done


def has_journal(folder: ParquetFolder) -> bool:
    return bool(
        folder.fs.get_file_info(pafs.FileSelector(folder.join(JOURNAL), allow_not_found=True))
    )


def _apply(folder: ParquetFolder, journal: Mapping[str, Any]) -> None:
    txn = str(journal["txn"])
    records = dict(journal.get("records") or {})
    if journal.get("snapshot_batch") is not None:  # a journal written before `records`
        records[SNAPSHOT] = {"batch": journal["snapshot_batch"], "txn": txn}
    for name, content in records.items():
        folder.write_durably(folder.join(name), json.dumps(content).encode())
    for staged, final in journal["adds"]:
        source = folder.join(STAGING, txn, staged)
        if folder.is_file(source):
            folder.fs.move(source, folder.join(final))
            pause_point("mid-commit")
    # The new names must be durable before the files they replace go.
    folder.sync_dir(folder.path)
    for name in journal["removes"]:
        target = folder.join(name)
        if folder.is_file(target):
            folder.fs.delete_file(target)
    folder.sync_dir(folder.path)
    folder.remove_staging(txn)
    folder.fs.delete_file(journal_path(folder, txn))


def _check_adds_present(folder: ParquetFolder, journal: Mapping[str, Any]) -> None:
    """Refuse to finish a commit whose new files are gone: its removals would lose rows."""
    txn = str(journal["txn"])
    for staged, final in journal["adds"]:
        if not (
            folder.is_file(folder.join(STAGING, txn, staged)) or folder.is_file(folder.join(final))
        ):
            raise WriteError(
                f"The lake table {folder.uri} has an unfinished commit ({JOURNAL}/{txn}.json) "
                f"whose staged file {STAGING}/{txn}/{staged} is missing and was never moved "
                f"into place as {final}. Finishing the commit would remove the files it "
                "replaces without adding their replacements, so nothing was changed. Fix: "
                "restore the staged file, or delete the journal and run a full refresh (asset "
                "config full_refresh: true) to rebuild the table."
            )
