"""The Iceberg catalog of `[sink.catalog]`, as Spark and as pyiceberg reach it: the one place that knows its kinds.

A Hadoop catalog is its warehouse folder: Spark gets its type and warehouse, and pyiceberg opens a table from its
newest metadata file (iceberg/table.py). A JDBC catalog is a database naming each table's current metadata file
(Iceberg's `JdbcCatalog`, the `iceberg_tables` table): Spark gets its JDBC URL, the user and password from the
environment (`ICEBERG_JDBC_USER` / `ICEBERG_JDBC_PASSWORD`, never from the config file) and MariaDB's driver from
tidemark's jar lock; pyiceberg reads the same table through its SQL catalog (SQLAlchemy with PyMySQL) under the same
catalog name, which `JdbcCatalog` writes in each row. tidemark's tools never create or change the catalog's tables.
The password is a secret: it goes into Spark's settings (whose `password` keys Spark redacts) and into the
SQLAlchemy URL only, and no message carries it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tidemark.config.catalog import (
    JDBC_PASSWORD_ENV,
    JDBC_URI_PREFIX,
    JDBC_USER_ENV,
    IcebergCatalogConfig,
    IcebergCatalogKind,
)
from tidemark.errors import CheckpointError, UsageError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from tidemark.findings import Finding

log = logging.getLogger(__name__)

# The name of the Spark catalog tidemark registers for [sink.catalog] (its tables: tidemark_iceberg.<ns>.<table>);
# a JDBC catalog keeps it in each of its rows, so pyiceberg reads them under the same name.
CATALOG = "tidemark_iceberg"
CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
# pyiceberg's FileIO for every table tidemark reads (`py-io-impl`, loaded by name): object stores through tidemark's
# storage layer and its credentials (iceberg/fileio.py).
FILE_IO = {"py-io-impl": "tidemark.sinks.iceberg.fileio.StoreFileIO"}


@dataclass(frozen=True, repr=False)
class JdbcAccess:
    """A JDBC catalog's database as pyiceberg reaches it. Holds the password: its repr names the place only."""

    where: str  # host:port/database, for messages
    url: str  # the SQLAlchemy URL, credentials included (a secret: never print it)
    password: str

    def __repr__(self) -> str:
        return f"JdbcAccess({self.where})"

    def scrub(self, text: str) -> str:
        """text with the password taken out (a driver's error may quote what it was given)."""
        return text.replace(self.password, "***") if self.password else text


def credentials() -> tuple[str, str]:
    """The JDBC catalog's user and password from the environment; one line naming what is missing."""
    user, password = os.environ.get(JDBC_USER_ENV), os.environ.get(JDBC_PASSWORD_ENV)
    missing = [name for name, value in ((JDBC_USER_ENV, user), (JDBC_PASSWORD_ENV, password)) if not value]
    if missing or user is None or password is None:
        msg = (
            f'[sink.catalog] type "jdbc" reads its user and password from the environment: set '
            f"{' and '.join(missing)} (they are never read from the config file)"
        )
        raise UsageError(msg)
    return user, password


def spark_settings(catalog: IcebergCatalogConfig) -> dict[str, str]:
    """The catalog's own Spark settings (under `spark.sql.catalog.tidemark_iceberg`); a JDBC catalog's user and
    password are read from the environment here (a missing one: one line)."""
    prefix = f"spark.sql.catalog.{CATALOG}"
    settings = {f"{prefix}.type": catalog.type.value, f"{prefix}.warehouse": catalog.warehouse}
    if catalog.type is IcebergCatalogKind.JDBC and catalog.uri is not None:
        user, password = credentials()
        settings[f"{prefix}.uri"] = catalog.uri
        settings[f"{prefix}.jdbc.user"] = user
        settings[f"{prefix}.jdbc.password"] = password
        # V1 keeps views beside tables (pyiceberg reads both versions); a new catalog is made at V1.
        settings[f"{prefix}.jdbc.schema-version"] = "V1"
    return settings


def reload_catalog(spark: SparkSession) -> None:
    """Make the session load `tidemark_iceberg` afresh from the settings in force now, at its next use.

    Spark loads a catalog once per session and keeps it under its name: without this, a second pipeline (or a tool)
    with another [sink.catalog] in the same session (a notebook's, the tests' shared one) would create, write and
    roll back its table in the first one's catalog. The name stays one for every catalog: a JDBC catalog writes it
    in each of its rows, where pyiceberg and other applications find the tables. The loaded catalog is closed (a
    JDBC catalog's connection pool). A streaming query is unaffected: it runs on a clone of the session, which loads
    its own catalogs from the settings it was started with. Over Spark Connect the server's session is out of reach
    (each client process gets a new one)."""
    from tidemark.connect import is_connect

    if is_connect(spark):
        return
    manager: Any = spark._jsparkSession.sessionState().catalogManager()  # py4j's view of Spark's CatalogManager
    # Spark offers no call that forgets one catalog (CatalogManager.reset forgets every one, and the current
    # namespace with them): its map of loaded catalogs is taken out by reflection.
    field = manager.getClass().getDeclaredField("catalogs")
    field.setAccessible(True)
    loaded = field.get(manager).remove(CATALOG)
    if not loaded.isDefined():
        return
    try:
        loaded.get().icebergCatalog().close()
    except Exception as exc:  # not a Closeable (a catalog with nothing to release)
        log.debug("the session's previous %s catalog was not closed: %s", CATALOG, type(exc).__name__)


def single_writer_warning(catalog: IcebergCatalogConfig) -> Finding | None:
    """A Hadoop catalog whose warehouse is on an object store, in one warning: it commits a table's new metadata by
    renaming a file, atomic on a local or HDFS file system but a copy and a delete on Azure Blob or S3, so two writers
    can both commit and one's snapshot is lost. One writer (tidemark's run lock keeps one per pipeline) is safe."""
    from tidemark.findings import Finding, Severity
    from tidemark.storage import StoreKind, parse_location

    if catalog.type is not IcebergCatalogKind.HADOOP:
        return None
    store = parse_location(catalog.warehouse)
    if store.is_local or store.kind is StoreKind.HDFS:
        return None
    message = (
        f"the Hadoop catalog's warehouse {catalog.warehouse} is on an object store, where its commit (a rename) is "
        "not atomic: safe for this pipeline as the table's only writer, not for another application writing it"
    )
    fix = 'for a table other applications write too, use [sink.catalog] type = "jdbc" (docs/iceberg.md)'
    return Finding("ICEBERG_HADOOP_CATALOG_ON_OBJECT_STORE", Severity.WARNING, message, fix)


def jdbc_access(catalog: IcebergCatalogConfig) -> JdbcAccess | None:
    """How pyiceberg reaches a JDBC catalog's database, None for a Hadoop catalog."""
    if catalog.type is not IcebergCatalogKind.JDBC or catalog.uri is None:
        return None
    from sqlalchemy.engine import URL

    user, password = credentials()
    parts = urlsplit("mysql://" + catalog.uri.removeprefix(JDBC_URI_PREFIX))
    database = parts.path.strip("/")
    url = URL.create(
        "mysql+pymysql", username=user, password=password, host=parts.hostname, port=parts.port, database=database
    )
    return JdbcAccess(f"{parts.netloc}/{database}", url.render_as_string(hide_password=False), password)


@dataclass(frozen=True)
class CatalogTable:
    """A table of a JDBC catalog: where its database is and its `namespace.table`."""

    access: JdbcAccess
    name: str

    def open(self) -> Table | None:
        """The table as the catalog names it now (open_catalog_table)."""
        return open_catalog_table(self.access, self.name)


def open_catalog_table(access: JdbcAccess, table: str) -> Table | None:
    """`namespace.table` as the JDBC catalog names it now, None when the catalog has no such table (or no tables
    yet). pyiceberg's SQL catalog is told never to create the catalog's own tables."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    try:
        catalog = SqlCatalog(CATALOG, uri=access.url, init_catalog_tables="false", **FILE_IO)
        try:
            return catalog.load_table(table)
        finally:
            catalog.engine.dispose()
    except NoSuchTableError:
        return None
    except Exception as exc:
        if "iceberg_tables" in str(exc) and "doesn't exist" in str(exc):
            return None  # no table was ever created in this catalog
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        msg = f"cannot read {table} through the JDBC catalog at {access.where}: {access.scrub(first)[:300]}"
        raise CheckpointError(msg) from exc
