"""What the configuration models share: a frozen base model, and value types that parse themselves.

Durations become `timedelta`s, cron strings are checked, Spark option values become the text
Spark takes, and paths become absolute against the configuration file's folder.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationInfo,
)

from incremental_assets.config.durations import DURATION, parse_duration


class FrozenModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def parse_duration_value(value: object) -> object:
    return value if isinstance(value, timedelta) else parse_duration(str(value))


def cron(value: str) -> str:
    # The exception to the banned-api rule (pyproject.toml): Dagster's own cron check.
    from dagster._utils.schedules import is_valid_cron_string  # noqa: TID251

    if not is_valid_cron_string(value):
        raise ValueError(f"'{value}' is not a cron expression such as '0 */2 * * *'")
    return value


def option_text(value: object) -> object:
    """An option value as Spark takes it: `true`, not `True`."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float | Decimal) else value


def absolute(path: str, info: ValidationInfo) -> str:
    """A path relative to the configuration file's folder; URIs (s3a://, hdfs://) as they are."""
    if len(urlparse(path).scheme) > 1:  # one letter would be a Windows drive
        return path.rstrip("/")
    base = (info.context or {}).get("base")
    return path if base is None else str((Path(base) / path).resolve())


# The `json_schema_input_type`s are what the file may hold, for the JSON schema (`outline.py`).
DurationText = Annotated[str, StringConstraints(pattern=DURATION.pattern)]
Duration = Annotated[
    timedelta, BeforeValidator(parse_duration_value, json_schema_input_type=DurationText)
]
Cron = Annotated[str, AfterValidator(cron)]
OptionText = Annotated[
    str, BeforeValidator(option_text, json_schema_input_type=str | int | float | bool)
]
