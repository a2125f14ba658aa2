"""The sources: a JDBC database (PostgreSQL, MySQL, MariaDB) or a folder of files.

A database source knows its kind from its URL, and the driver class that kind needs unless the
user names a driver of their own (the driver's jar is `jvm.SOURCE_DRIVERS[kind]`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from incremental_assets.config.fields import FrozenModel, OptionText, absolute

# Each source database: its URL prefixes and its default driver class.
_DATABASES = {
    "postgres": (("jdbc:postgresql:",), "org.postgresql.Driver"),
    "mysql": (("jdbc:mysql:", "jdbc:mariadb:"), "org.mariadb.jdbc.Driver"),
}


class JdbcSourceSpec(FrozenModel):
    type: Literal["jdbc"] = "jdbc"
    name: str
    url: str = Field(
        description="jdbc:postgresql://host:5432/db, jdbc:mysql://host:3306/db or jdbc:mariadb://..."
    )
    user: str | None = None
    password: str | None = Field(None, repr=False)
    driver: str = Field(
        "", description="The JDBC driver class; by default pgjdbc's or MariaDB Connector/J's."
    )
    properties: dict[str, str] = Field(default_factory=dict)
    fetchsize: int = Field(10_000, gt=0)
    max_partitions: int | None = Field(None, gt=0)
    rows_per_partition: int = Field(250_000, gt=0)

    @field_validator("url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        prefixes = [p for prefixes, _ in _DATABASES.values() for p in prefixes]
        if not url.startswith(tuple(prefixes)):
            raise ValueError(
                f"'{url}' is not a JDBC URL of a database this version reads: PostgreSQL "
                "(jdbc:postgresql://host:5432/db), MySQL or MariaDB (jdbc:mysql://host:3306/db or "
                "jdbc:mariadb://host:3306/db)"
            )
        return url

    @model_validator(mode="after")
    def _default_driver(self) -> JdbcSourceSpec:
        if not self.driver:
            object.__setattr__(self, "driver", _DATABASES[self.kind][1])
        return self

    @property
    def kind(self) -> str:
        """Which database: `postgres` or `mysql` (MySQL and MariaDB)."""
        return next(k for k, (prefixes, _) in _DATABASES.items() if self.url.startswith(prefixes))

    @property
    def default_driver(self) -> bool:
        """Whether the source uses its database's default driver (whose jar the sessions get)."""
        return self.driver == _DATABASES[self.kind][1]

    def redacted_url(self) -> str:
        return self.url.split("?", 1)[0]


class FilesSourceSpec(FrozenModel):
    type: Literal["files"] = "files"
    name: str
    path: str
    format: Literal["parquet", "csv", "json"] = "parquet"
    options: dict[str, OptionText] = Field(default_factory=dict)

    @field_validator("path")
    @classmethod
    def _resolved(cls, value: str, info: ValidationInfo) -> str:
        return absolute(value, info)

    @property
    def kind(self) -> str:
        return self.format


SourceSpec = Annotated[JdbcSourceSpec | FilesSourceSpec, Field(discriminator="type")]
