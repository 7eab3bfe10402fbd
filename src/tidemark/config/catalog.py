"""[sink.catalog]: the Iceberg catalog an Iceberg sink's table lives in, and where a JDBC catalog's credentials
come from (the environment only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from tidemark.compat import StrEnum


class IcebergCatalogKind(StrEnum):
    """The Iceberg catalogs the Iceberg sink writes through."""

    HADOOP = "hadoop"  # path-based: the table's folder is <warehouse>/<namespace>/<table>
    JDBC = "jdbc"  # a database names each table's current metadata file; its folder is <warehouse>/<namespace>/<table>


# The JDBC driver tidemark pins (spark/artifacts.py) and where a JDBC catalog's user and password come from: the
# environment only, never the config file (which gets copied, committed and printed).
JDBC_URI_PREFIX = "jdbc:mariadb://"
JDBC_USER_ENV = "ICEBERG_JDBC_USER"
JDBC_PASSWORD_ENV = "ICEBERG_JDBC_PASSWORD"  # noqa: S105 (the variable's name, not a password)


class IcebergCatalogConfig(BaseModel):
    """[sink.catalog]: the Iceberg catalog `[sink] table` names a table in (format "iceberg")."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # as every config table

    type: IcebergCatalogKind = IcebergCatalogKind.HADOOP
    warehouse: str  # a local folder (relative: to the config file's), or abfs://, wasbs://, s3a://
    uri: str | None = None  # jdbc only: jdbc:mariadb://host:port/database (credentials from the environment)

    @model_validator(mode="after")
    def _check(self) -> IcebergCatalogConfig:
        if self.type is IcebergCatalogKind.JDBC:
            if self.uri is None or not self.uri.startswith(JDBC_URI_PREFIX):
                msg = (
                    f'sink.catalog type "jdbc" needs uri = "{JDBC_URI_PREFIX}host:port/database" (its user and '
                    f"password come from {JDBC_USER_ENV} / {JDBC_PASSWORD_ENV})"
                )
                raise ValueError(msg)
            if "@" in self.uri or "?" in self.uri:
                msg = (
                    f"sink.catalog.uri takes no user, password or driver options: give {JDBC_URI_PREFIX}host:port/"
                    f"database, with the user and password in {JDBC_USER_ENV} / {JDBC_PASSWORD_ENV}"
                )
                raise ValueError(msg)
        elif self.uri is not None:
            msg = f'sink.catalog.uri is for type "jdbc", not "{self.type.value}" (a path-based catalog): drop it'
            raise ValueError(msg)
        return self

    def table_location(self, table: str) -> str:
        """The folder of `namespace.table` in the catalog's warehouse (a Hadoop catalog's, and a JDBC catalog's
        default for the tables it creates)."""
        return "/".join([self.warehouse.rstrip("/"), *table.split(".")])
