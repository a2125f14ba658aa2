"""`type: incremental_assets.IncrementalTablesComponent`: the tables as a Dagster Component.

A `dg` project's `defs/<folder>/defs.yaml` holds, under `attributes:`, exactly what
incremental_assets.yaml holds (key_prefix, translator, spark, lake, sources, tables), and they are
checked by the same code: every problem at once, in the same words. Relative paths are relative to
the folder of the defs.yaml; `${VAR}` works as in the file, and so do Dagster's `{{ env.VAR }}`
templates. A table whose settings are wrong becomes an asset that fails, as with the file
(`definitions.py`). See docs/component.md.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from pydantic import BaseModel, ConfigDict

from incremental_assets.config import InvalidTable, Project, SparkSpec, config_from_mapping
from incremental_assets.config.loading import ExactLoader
from incremental_assets.config.outline import file_schema
from incremental_assets.definitions import build_definitions
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator, translator_for


class IncrementalTablesAttributes(BaseModel):
    """What `attributes:` holds: the configuration file's settings.

    Its JSON schema, which `dg` shows and `dg check yaml` checks, is the file's
    (`config/outline.py`), with every setting's type; the values themselves are checked by
    `incremental_assets.config` when the component loads, so that the messages are the file's.
    """

    model_config = ConfigDict(extra="allow")

    key_prefix: Any = None
    translator: Any = None
    spark: Any = None
    lake: Any = None
    sources: Any = None
    tables: Any = None

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return file_schema()


class IncrementalTablesComponent(dg.Component):
    """Incremental table loads into an Iceberg (or plain Parquet) lake, one asset per table."""

    def __init__(self, project: Project, invalid_tables: Sequence[InvalidTable] = ()) -> None:
        self.project = project
        self.invalid_tables = tuple(invalid_tables)

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return IncrementalTablesAttributes

    @classmethod
    def get_spec(cls) -> dg.ComponentTypeSpec:
        return dg.ComponentTypeSpec(
            description="Incremental table loads (PostgreSQL, MariaDB, MySQL or files) into an "
            "Iceberg or plain Parquet lake.",
            tags=["spark", "iceberg", "parquet"],
            produces=["asset", "asset_check", "job", "schedule", "sensor", "resource"],
        )

    @classmethod
    def load(
        cls, attributes: BaseModel | None, context: dg.ComponentLoadContext
    ) -> "IncrementalTablesComponent":
        file, raw = _attributes_as_written(attributes, context)
        raw = _render_templates(raw, context.resolution_context.at_path("attributes"))
        loaded = config_from_mapping(raw if raw is not None else {}, file)
        return cls(loaded.project, loaded.invalid_tables)

    def get_translator(self) -> IncrementalAssetsTranslator:
        """Override to name assets in Python; `translator:` in the attributes does it in YAML.

        The job and the automation sensor take the key prefix as a suffix, so that several
        components live side by side in one code location.
        """
        tables = [*self.project.tables, *(invalid.table for invalid in self.invalid_tables)]
        prefix = tables[0].key_prefix if tables else ()
        return translator_for(self.project, suffix="".join(f"__{p}" for p in prefix))

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return build_definitions(
            self.project,
            self.get_translator(),
            spark=_shared_spark(self.project.spark),
            invalid_tables=self.invalid_tables,
        )


_SPARK_RESOURCES: dict[str, IncrementalSparkResource] = {}


def _shared_spark(spec: SparkSpec) -> IncrementalSparkResource:
    """One resource object per Spark settings: Dagster merges components' resources by identity.

    Components with different Spark settings can't share a code location (one SparkSession per
    process), which Dagster then reports by the resource key `spark`.
    """
    key = spec.model_dump_json()
    if key not in _SPARK_RESOURCES:
        _SPARK_RESOURCES[key] = IncrementalSparkResource.from_spec(spec)
    return _SPARK_RESOURCES[key]


def _attributes_as_written(
    attributes: BaseModel | None, context: dg.ComponentLoadContext
) -> tuple[Path, Any]:
    """The `attributes:` mapping read again with the configuration's loader (1.50 stays exact).

    Dagster's own YAML reading turns `lookback: 0.50` into a float; a component made in Python
    (with no file) falls back to the attributes Dagster validated.
    """
    tree = context.resolution_context.source_position_tree
    filename = tree.position.filename if tree is not None else None
    if filename and Path(filename).is_file():
        file = Path(filename).resolve()
        documents = list(yaml.load_all(file.read_text(), Loader=ExactLoader))
        index = context.component_path.instance_key
        document = documents[index if isinstance(index, int) else 0]
        return file, document.get("attributes") if isinstance(document, Mapping) else None
    raw = attributes.model_dump(exclude_unset=True) if attributes is not None else None
    return context.path / "defs.yaml", raw


def _render_templates(node: Any, context: dg.ResolutionContext) -> Any:
    """Render the `{{ ... }}` strings only: Dagster's renderer would turn a plain '100' into 100."""
    if isinstance(node, Mapping):
        return {k: _render_templates(v, context.at_path(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_render_templates(v, context.at_path(i)) for i, v in enumerate(node)]
    if isinstance(node, str) and ("{{" in node or "{%" in node):
        return context.resolve_value(node)
    return node
