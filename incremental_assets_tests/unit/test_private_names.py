"""A lint rule ruff can't express: the package imports no private PyIceberg name, neither a
`pyiceberg` module nor a name starting with `_` (PyIceberg's internals change without notice; the
package reads tables through its public API and writes them through Spark). Dagster's private
modules are banned in pyproject.toml (`TID251`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "incremental_assets"


def private_pyiceberg_imports(source: str) -> list[str]:
    """Each `import` of a private PyIceberg module or name in `source`, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg":
            parts = [*node.module.split("."), *(a.name for a in node.names)]  # type: ignore[union-attr]
            if any(p.startswith("_") for p in parts):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pyiceberg" and any(p.startswith("_") for p in parts):
                    found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize(
    "source",
    [
        "from pyiceberg.table.update.snapshot import _SnapshotProducer",
        "from pyiceberg.io._internal import x",
        "import pyiceberg._private.y",
    ],
)
def test_the_rule_finds_a_private_name(source: str) -> None:
    assert private_pyiceberg_imports(source) == [source]


def test_the_package_imports_no_private_pyiceberg_name() -> None:
    files = sorted(PACKAGE.rglob("*.py"))

    found = {str(f.relative_to(PACKAGE)): private_pyiceberg_imports(f.read_text()) for f in files}

    assert len(files) > 50
    assert {f: names for f, names in found.items() if names} == {}
    assert (
        "from pyiceberg.catalog import load_catalog"
        in (PACKAGE / "lake" / "iceberg" / "metadata.py").read_text()
    )  # the rule reads the files that import PyIceberg
