"""A MariaDB server of the tests' own, and Azurite keeping its metadata in it (`AZURITE_DB`, Azurite's SQL store).

Azurite's default metadata store (LokiJS) scans the account on each request and re-saves its whole database every
few seconds, so its cost per request grows with the container; its SQL store keeps blobs in a table with a unique
index on (account, container, blob, snapshot) and does not (docs/spikes/2026-11-27-delta-azure.md: 1.03-1.17x from
2,000 to 201,000 blobs). MariaDB is Debian's package (`make mariadb` installs it without starting Debian's service);
each server here has its own data folder, a loopback port and a socket there, a buffer pool sized for tests, and is
stopped by its pid. The data folder is made once per MariaDB version by `mariadb-install-db` (about 7 s) and copied
from a cache outside the clone after that.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import (
    ACCOUNT,
    Azurite,
    _stop,
    _wait_for_port,
    azurite_account_key,
    free_port,
    start_azurite_process,
)

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark-ci" / "mariadb"
DATABASE = "azurite"
USER = "azurite"
TIMEOUT_S = 60.0

# Azurite 3.35.0's SQL store declares Blocks.blockName VARCHAR(64) ("TODO: Check max block name length" in its
# SqlBlobMetadataStore), while Azure takes block ids of up to 64 bytes before base64 (88 characters). Hadoop's ABFS
# over the Blob endpoint names its blocks with longer ids (`MF81MDgz...AAAA`, 80 characters): every Put Block it
# sends fails with 500 Internal Server Error and `tidemark run` retries for ever (seen 2026-11-28 on Spark 4.1.4;
# WASB's shorter ids pass). Azurite creates its tables only where they do not exist (sequelize sync without
# alter), so the table is made here first, as Azurite would make it, with room for Azure's longest id.
AZURITE_BLOCKS_TABLE = """
CREATE TABLE Blocks (
  id int(11) NOT NULL AUTO_INCREMENT,
  accountName varchar(64) NOT NULL,
  containerName varchar(255) NOT NULL,
  blobName varchar(255) NOT NULL,
  blockName varchar(88) NOT NULL,
  deleting int(10) unsigned NOT NULL DEFAULT 0,
  size int(10) unsigned NOT NULL,
  persistency varchar(255) DEFAULT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY blocks_account_name_container_name_blob_name_block_name
    (accountName, containerName, blobName, blockName)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""


def _version() -> str:
    out = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[2] if len(out.split()) > 2 else out.strip()


def _template() -> Path:
    """An initialised data folder (system tables only) for this MariaDB version, made once."""
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        raise RuntimeError("MariaDB is not installed: run `make mariadb` (Debian's mariadb-server)")
    template = CACHE / _version().replace("/", "_")
    if (template / "mysql").is_dir():
        return template
    partial = template.with_name(template.name + f".{os.getpid()}.part")
    shutil.rmtree(partial, ignore_errors=True)
    command = [
        "mariadb-install-db",
        "--no-defaults",
        f"--datadir={partial}",
        "--auth-root-authentication-method=normal",
        "--user=root",
        "--skip-test-db",
    ]
    subprocess.run(command, capture_output=True, check=True, timeout=120)
    try:
        partial.rename(template)  # an empty or absent folder is replaced; a template another process made stays
    except OSError:
        if not (template / "mysql").is_dir():
            raise
        shutil.rmtree(partial, ignore_errors=True)
    return template


def run_sql(socket: Path, statement: str, timeout: float = 300) -> str:
    """Run one statement as root over a server's socket; its tab-separated output."""
    command = ["mariadb", "--no-defaults", "-S", str(socket), "-uroot", "-N", "-B", "-e", statement]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"mariadb: {done.stderr.strip()}")
    return done.stdout


def copyable_blob_columns(sql: Callable[[str], str]) -> str:
    """The columns of Azurite's `Blobs` table a copied row keeps (all but its key and its name), comma-separated:
    the benchmarks grow a container by copying one real blob's row under new names."""
    columns = sql(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME = 'Blobs' ORDER BY ORDINAL_POSITION"
    ).split()
    return ", ".join(c for c in columns if c not in ("blobId", "blobName"))


@dataclass
class MariaDB:
    """A running MariaDB server: its data folder, port, socket and the Azurite database's URL."""

    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    password: str

    @property
    def socket(self) -> Path:
        return self.folder / "mariadb.sock"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def azurite_db(self) -> str:
        """The `AZURITE_DB` value: mysql://user:password@host:port/database (a secret: never print it)."""
        return f"mysql://{USER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def sql(self, statement: str) -> str:
        """Run one statement as root over the socket; its tab-separated output."""
        return run_sql(self.socket, statement)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)  # a clean shutdown: InnoDB flushes and the server exits
            try:
                self.process.wait(TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def start_mariadb(folder: Path, buffer_pool: str = "128M") -> MariaDB:
    """Copy the initialised data folder under `folder`, start the server on a free loopback port, create the
    Azurite database and its user (a random password)."""
    data = folder / "data"
    shutil.copytree(_template(), data)
    port = free_port()
    log = folder / "mariadb.log"
    command = [
        "mariadbd",
        "--no-defaults",
        "--user=root",
        f"--datadir={data}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--socket={folder / 'mariadb.sock'}",
        f"--pid-file={folder / 'mariadb.pid'}",
        f"--log-error={log}",
        f"--innodb-buffer-pool-size={buffer_pool}",
        "--skip-name-resolve",
        "--skip-log-bin",
    ]
    with (folder / "mariadb.out").open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = MariaDB(folder, port, process, secrets.token_hex(12))
    try:
        _wait_for_port(port, process, "mariadbd", log if log.exists() else folder / "mariadb.out")
        server.sql(
            f"CREATE DATABASE {DATABASE}; CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{server.password}'; "
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1'; USE {DATABASE}; {AZURITE_BLOCKS_TABLE};"
        )
    except BaseException:
        server.stop()
        raise
    return server


@dataclass(frozen=True)
class SqlAzurite:
    """Azurite's blob service on its SQL metadata store, and the MariaDB behind it."""

    azurite: Azurite
    mariadb: MariaDB
    process: subprocess.Popen[bytes]
    location: Path  # where Azurite keeps blob bytes (metadata is in MariaDB)

    def blob_rows(self) -> int:
        """Blobs Azurite's SQL store holds for the test account (its table `Blobs`)."""
        rows = self.mariadb.sql(f"SELECT COUNT(*) FROM {DATABASE}.Blobs WHERE accountName = '{ACCOUNT}'")
        return int(rows.strip())

    def stop(self) -> None:
        _stop(self.process)
        self.mariadb.stop()


def start_sql_azurite(folder: Path, port: int | None = None) -> SqlAzurite:
    """MariaDB, then Azurite's blob service on it (a free loopback port unless one is given)."""
    mariadb = start_mariadb(folder / "mariadb")
    location = folder / "azurite"
    location.mkdir()
    port = port or free_port()
    env = {**os.environ, "AZURITE_DB": mariadb.azurite_db}
    try:
        args = ("--location", str(location))
        process = start_azurite_process(port, folder / "azurite.log", *args, env=env, what="azurite-blob (SQL store)")
    except BaseException:
        mariadb.stop()
        raise
    return SqlAzurite(Azurite(port, azurite_account_key(), process.pid), mariadb, process, location)


@pytest.fixture(scope="session")
def sql_azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlAzurite]:
    """Azurite on MariaDB for the session (the ABFS tests run on it; the wasbs ones on the in-memory one)."""
    server = start_sql_azurite(tmp_path_factory.mktemp("sql-azurite"))
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class IcebergDatabase:
    """A database and user of its own for an Iceberg JDBC catalog on a test MariaDB (the password: a secret)."""

    mariadb: MariaDB
    database: str
    user: str
    password: str

    @property
    def jdbc_uri(self) -> str:
        """The catalog's `[sink.catalog] uri` (no credentials: those come from the environment)."""
        return f"jdbc:mariadb://127.0.0.1:{self.mariadb.port}/{self.database}"

    @property
    def env(self) -> dict[str, str]:
        """ICEBERG_JDBC_USER / ICEBERG_JDBC_PASSWORD, as tidemark reads them."""
        return {"ICEBERG_JDBC_USER": self.user, "ICEBERG_JDBC_PASSWORD": self.password}


@pytest.fixture(scope="session")
def iceberg_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergDatabase]:
    """MariaDB for the session with a database and user for Iceberg's JDBC catalog (the catalog makes its tables)."""
    server = start_mariadb(tmp_path_factory.mktemp("iceberg-mariadb"), buffer_pool="64M")
    try:
        found = IcebergDatabase(server, "iceberg", "iceberg", secrets.token_hex(12))
        server.sql(
            f"CREATE DATABASE {found.database}; CREATE USER '{found.user}'@'127.0.0.1' IDENTIFIED BY "
            f"'{found.password}'; GRANT ALL ON {found.database}.* TO '{found.user}'@'127.0.0.1';"
        )
        yield found
    finally:
        server.stop()
