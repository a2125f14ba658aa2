"""The docs' reader snippets, run as a reader would run them.

A snippet is the fenced code block right after a `<!-- snippet: <name> -->` comment (which
Markdown doesn't show) in README.md or docs/*.md. `filled` replaces the docs' example values
(the lake's path, a snapshot id, ...) with a real lake's, by plain string substitution;
`reads_of` runs the code statement by statement and keeps what each top-level expression read
(a Spark, Polars or pyarrow table, a DuckDB relation) as its (id, note) rows.

`python -m incremental_assets_tests.support.snippets` runs the snippet on its stdin in a process
of its own (a snippet that builds its own SparkSession), printing its reads as JSON.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
from pyspark.sql import DataFrame

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_MARKED = re.compile(
    r"<!-- snippet: (?P<name>[\w-]+) -->\n+```\w*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE
)
_BLOCK = re.compile(r"^```(?P<language>\w*)\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
Rows = list[tuple[Any, ...]]


def doc_snippets() -> dict[str, str]:
    """Every marked snippet of the docs, by name."""
    found: dict[str, str] = {}
    for document in DOCUMENTS:
        for match in _MARKED.finditer(document.read_text()):
            assert match["name"] not in found, f"two snippets named {match['name']}"
            found[match["name"]] = match["code"]
    return found


def doc_code_blocks(language: str) -> list[str]:
    """Every fenced block of `language` in the docs, marked or not."""
    return [
        match["code"]
        for document in DOCUMENTS
        for match in _BLOCK.finditer(document.read_text())
        if match["language"] == language
    ]


def filled(code: str, values: Mapping[str, str]) -> str:
    """`code` with each of the docs' example values replaced, in order; each must be there."""
    for example, value in values.items():
        assert example in code, f"the snippet no longer shows {example!r}:\n{code}"
        code = code.replace(example, value)
    return code


def reads_of(code: str, namespace: dict[str, Any], columns: Sequence[str]) -> list[Rows]:
    """Runs `code` in `namespace`: the sorted `columns` of each table its top-level expressions
    read, in order (other values, such as a connection a statement returns, are not reads)."""
    reads = []
    for statement in ast.parse(code).body:
        if isinstance(statement, ast.Expr):
            value = eval(compile(ast.Expression(statement.value), "<snippet>", "eval"), namespace)
            if isinstance(value, DataFrame | pa.Table | pl.DataFrame | duckdb.DuckDBPyRelation):
                reads.append(_rows(value, columns))
        else:
            exec(compile(ast.Module([statement], []), "<snippet>", "exec"), namespace)
    return reads


def _rows(table: Any, columns: Sequence[str]) -> Rows:
    if isinstance(table, DataFrame):
        return sorted(tuple(row) for row in table.select(*columns).collect())
    if isinstance(table, pa.Table):
        return sorted(tuple(row.values()) for row in table.select(list(columns)).to_pylist())
    if isinstance(table, pl.DataFrame):
        return sorted(table.select(columns).rows())
    return sorted(table.project(", ".join(columns)).fetchall())


def reads_in_a_process_of_its_own(code: str, columns: Sequence[str]) -> list[Rows]:
    """`reads_of` in a fresh Python process (this module run as a script)."""
    done = subprocess.run(
        [sys.executable, "-m", __name__, *columns],
        input=code,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"the snippet failed:\n{code}\n{done.stderr[-4000:]}"
    reads = json.loads(done.stdout.splitlines()[-1])  # after anything the snippet prints
    return [[tuple(row) for row in read] for read in reads]


if __name__ == "__main__":
    print(json.dumps(reads_of(sys.stdin.read(), {}, sys.argv[1:]), default=str))
