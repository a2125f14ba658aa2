"""The configuration's JSON schema: what `incremental_assets.yaml` and a component's `attributes:`
may hold, with each setting's type, default and description, for `dg` and for editors.

It is generated from the models the loader validates with, so it can't drift from them. It is an
outline, not the check: the rules settings follow together (`rules.py`) are the loader's, and a
value that isn't text may also be written as `${VAR}` or `{{ env.VAR }}`, which become the value
only when the configuration loads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from incremental_assets.config.lake import LakeSpec
from incremental_assets.config.loading import TopLevel
from incremental_assets.config.models import SparkSpec, TableSpec
from incremental_assets.config.shorthand import SHORTHAND
from incremental_assets.config.sources import FilesSourceSpec, JdbcSourceSpec

# Text that a template or an environment variable becomes the value of.
_TEMPLATED = {"type": "string", "pattern": r"\$\{|\{\{", "description": "${VAR} or {{ env.VAR }}"}
_UNITS = ((timedelta(weeks=1), "w"), (timedelta(days=1), "d"), (timedelta(hours=1), "h"))
_SMALL_UNITS = ((timedelta(minutes=1), "m"), (timedelta(seconds=1), "s"))


def file_schema() -> dict[str, Any]:
    """The JSON schema of the configuration file (and of a component's `attributes:`)."""
    models: list[tuple[type[BaseModel], Any]] = [
        (model, "validation")
        for model in (TopLevel, SparkSpec, LakeSpec, JdbcSourceSpec, FilesSourceSpec, TableSpec)
    ]
    refs, schema = models_json_schema(models, schema_generator=_FileValues)
    defs = schema["$defs"]
    top_level, spark, lake, jdbc, files, table = (refs[m]["$ref"] for m in models)
    top = defs.pop(_def_name(top_level))
    for source in (jdbc, files):
        _drop_name(defs[_def_name(source)])  # the source's name is its key under `sources:`
    table_def = defs[_def_name(table)]
    table_def["properties"]["source"] = {"type": "string", "description": "A key of `sources:`."}
    table_def["required"] = [r for r in table_def.get("required", []) if r != "mode"]
    # A table entry is a mapping or a one-line shorthand: one definition for both, so that a
    # wrong setting is reported where it is and `dg` lists a table's settings.
    table_def["type"] = ["object", "string"]
    table_def["if"] = {"type": "string"}
    table_def["then"] = {"pattern": SHORTHAND.pattern}
    table_def["description"] = (
        "A table: a mapping, or a one-line shorthand "
        "[source/]schema.table:column:type[:i|:e][@start][!append|!upsert]."
    )
    outline: dict[str, Any] = _flattened(
        {
            "$defs": defs,
            "type": "object",
            "additionalProperties": False,
            "required": ["lake", "sources", "tables"],
            "properties": {
                **top["properties"],
                "spark": {"$ref": spark},
                "lake": {"$ref": lake},
                "sources": {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {
                        "if": {"required": ["type"], "properties": {"type": {"const": "files"}}},
                        "then": {"$ref": files},
                        "else": {"$ref": jdbc},
                    },
                    "description": "The sources, by name: a database (type: jdbc) or a folder of "
                    "files (type: files).",
                },
                "tables": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": table},
                    "description": "The tables to load: mappings, or one-line shorthands.",
                },
            },
        }
    )
    return outline


def _def_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _drop_name(definition: dict[str, Any]) -> None:
    definition["properties"].pop("name", None)
    definition["required"] = [r for r in definition.get("required", []) if r != "name"]


def duration_text(value: timedelta) -> str:
    """A duration as the configuration writes it: `1d`, `5m`, `90s`."""
    for unit, suffix in (*_UNITS, *_SMALL_UNITS):
        if value and value % unit == timedelta(0):
            return f"{value // unit}{suffix}"
    return f"{int(value / timedelta(milliseconds=1))}ms"


class _FileValues(GenerateJsonSchema):
    """Values as the file writes them: any value that isn't text may be a template instead, and
    defaults are shown in the file's words (`5m`, not `PT5M`)."""

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        written = super().str_schema(schema)
        return _or_templated(written) if "pattern" in written else written

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return _or_templated(super().int_schema(schema))

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return _or_templated(super().float_schema(schema))

    def decimal_schema(self, schema: core_schema.DecimalSchema) -> JsonSchemaValue:
        return _or_templated(super().decimal_schema(schema))

    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return _or_templated(super().bool_schema(schema))

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        return _or_templated(super().literal_schema(schema))

    def enum_schema(self, schema: core_schema.EnumSchema) -> JsonSchemaValue:
        return _or_templated(super().enum_schema(schema))

    def encode_default(self, dft: Any) -> Any:
        return super().encode_default(_in_file_words(dft))


def _in_file_words(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _in_file_words(value.model_dump(by_alias=True))
    if isinstance(value, dict):
        return {k: _in_file_words(v) for k, v in value.items()}
    return duration_text(value) if isinstance(value, timedelta) else value


def _or_templated(schema: JsonSchemaValue) -> JsonSchemaValue:
    """`anyOf` the value and a template, as Dagster's own components write it (`dg` shows the
    types of a flat `anyOf`)."""
    return {"anyOf": [schema, _TEMPLATED]}


def _flattened(node: Any) -> Any:
    """The schema with each `anyOf` nested directly in another `anyOf` merged into it."""
    if isinstance(node, list):
        return [_flattened(n) for n in node]
    if not isinstance(node, dict):
        return node
    flat = {k: _flattened(v) for k, v in node.items()}
    if "anyOf" in flat:
        flat["anyOf"] = [
            part
            for option in flat["anyOf"]
            for part in (option["anyOf"] if set(option) == {"anyOf"} else [option])
        ]
    return flat
