"""The Iceberg sink with its warehouse on object stores (#56): Azure Blob through Azurite (`wasbs://`, hadoop-azure's
emulator mode through the proxy on port 10000) and S3 through moto (`s3a://`), on this environment's Spark (4.1).

A JDBC catalog on a real MariaDB (tests/mariadb.py) names the table; its warehouse, and so every file Spark writes
for the table, is on the store, while the checkpoint stays local: the session reaches the warehouse only because the
sink names it (`spark_locations`), through Iceberg's HadoopFileIO and the Hadoop settings tidemark derives from the
environment. `tidemark run` and `recover --apply` run in their own processes; the table is read back by the test's
own pyiceberg SQL catalog on the same database with pyiceberg's own FileIO (never tidemark's) and compared with the
pandas oracle. A Hadoop catalog on Azurite and on S3 works too, for one writer, and each run says so in one
warning line; on S3 it is read back with pyiceberg's own FileIO from the table's version hint, exact through a lost
checkpoint, `recover --apply` and a run after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import load_file_io
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.table import StaticTable, Table

from tests.helpers import write_config
from tests.integration.test_iceberg_jdbc import KEY, _assert_exact
from tests.integration.test_recovery import _expected
from tests.mariadb import IcebergDatabase
from tests.servers import SparkStore
from tidemark.config import load_config
from tidemark.pipeline.generate import GenerateResult, generate_events
from tidemark.recovery.audit import audit_sink
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WARNING_CODE = "ICEBERG_HADOOP_CATALOG_ON_OBJECT_STORE"


class WasbFileIO(FsspecFileIO):
    """pyiceberg's fsspec FileIO (adlfs) for the `wasbs://container@account.blob...` URIs Spark writes: adlfs strips
    only its own schemes, so the test hands it the same container and path under `abfs://`."""

    @staticmethod
    def _adlfs_form(location: str) -> str:
        scheme, rest = location.split("://", 1)
        return f"abfs://{rest}" if scheme in ("wasb", "wasbs") else location

    def new_input(self, location: str) -> Any:
        return super().new_input(self._adlfs_form(location))

    def new_output(self, location: str) -> Any:
        return super().new_output(self._adlfs_form(location))


def _file_io(store: SparkStore) -> dict[str, str]:
    """pyiceberg's own FileIO properties for the store, from the environment the fixture set."""
    if store.kind == "wasb":
        return {
            "py-io-impl": f"{__name__}.WasbFileIO",
            "adls.connection-string": store.env["AZURE_STORAGE_CONNECTION_STRING"],
        }
    return {
        "s3.endpoint": store.env["AWS_ENDPOINT_URL"],
        "s3.access-key-id": store.env["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": store.env["AWS_SECRET_ACCESS_KEY"],
        "s3.region": store.env["AWS_DEFAULT_REGION"],
    }


def _frame(table: Table) -> pd.DataFrame:
    frame = table.scan().to_arrow().to_pandas()
    frame["windowStart"] = pd.to_datetime(frame["windowStart"], utc=True)
    return frame.sort_values(KEY).reset_index(drop=True)


def _events(tmp_path: Path) -> GenerateResult:
    # One file: one batch and the no-data one that closes its windows (65 rows; some stay open). Each batch is an
    # Iceberg commit on the store (seconds there) and each command a JVM of its own, so the data stays this small.
    data = generate_events(tmp_path / "all", events=200, keys=3, files=1, seed=56)
    (tmp_path / "landing").mkdir()
    for file in data.files:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    return data


def _command(*argv: str, secret: str | None = None) -> subprocess.CompletedProcess[str]:
    """A tidemark command in its own process (a fresh JVM), with this process's environment (the store's)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    line = [sys.executable, "-m", "tidemark.cli.main", *argv]
    done = subprocess.run(line, env=env, capture_output=True, text=True, timeout=600, check=False)
    if secret is not None:
        assert secret not in done.stdout + done.stderr  # the catalog's password is never printed
    return done


@pytest.mark.parametrize("kind", ["wasb", "s3a"])
def test_a_jdbc_catalog_with_its_warehouse_on_a_store_is_exact_through_a_lost_checkpoint(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    iceberg_mariadb: IcebergDatabase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store: SparkStore = request.getfixturevalue(f"{kind}_store")
    db = iceberg_mariadb
    # Each store fixture sets its environment for the module and clears the other's: this test's store wins here.
    for name, value in {**store.env, **db.env}.items():
        monkeypatch.setenv(name, value)
    data = _events(tmp_path)
    warehouse = f"{store.new_root()}/warehouse"
    table_name = f"lake.clicks_{kind}_{uuid.uuid4().hex[:6]}"
    catalog = {"type": "jdbc", "warehouse": warehouse, "uri": db.jdbc_uri}
    sink = {"format": "iceberg", "path": None, "table": table_name, "catalog": catalog}
    config = write_config(tmp_path, pipeline={"name": f"ice-{kind}"}, sink=sink)
    expected = _expected(list(data.files))
    assert len(expected) > 0

    def read() -> Table:
        uri = f"mysql+pymysql://{db.user}:{db.password}@127.0.0.1:{db.mariadb.port}/{db.database}"
        reader = SqlCatalog("tidemark_iceberg", uri=uri, init_catalog_tables="false", **_file_io(store))
        try:
            return reader.load_table(table_name)
        finally:
            reader.engine.dispose()

    done = _command("run", str(config), "--available-now", secret=db.password)
    assert done.returncode == 0, done.stderr[-3000:]
    assert WARNING_CODE not in done.stderr  # a JDBC catalog commits through its database: no single-writer warning
    table = read()
    # Every file of the table is on the store, below the warehouse, where the catalog put it.
    assert table.metadata_location.startswith(f"{warehouse}/{table_name.replace('.', '/')}/metadata/"), (
        table.metadata_location
    )
    assert all(p.startswith(warehouse) for p in table.inspect.files().column("file_path").to_pylist())
    snapshots = _exact_nothing_local_and_audited(table, config, expected, tmp_path)

    # The checkpoint lost: recover reads the windows the table holds on the store (through the catalog) and replays
    # none of them; the table gets no new snapshot and is exact.
    shutil.rmtree(tmp_path / "checkpoint")
    recovered = _command("recover", str(config), "--apply", secret=db.password)
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert "verified" in recovered.stdout and "0 duplicate" in recovered.stdout, recovered.stdout
    again = read()
    _assert_exact(_frame(again), expected)
    assert len(again.metadata.snapshots) >= snapshots


def _exact_nothing_local_and_audited(
    table: Table | StaticTable, config: Path, expected: pd.DataFrame, tmp_path: Path
) -> int:
    """The table (read with pyiceberg) equals the oracle, no metadata file landed locally, and `audit`, in this
    process without a JVM, reads the table's snapshots on the store: each batch once, every row. Its snapshots."""
    assert not list(tmp_path.glob("**/*.metadata.json"))
    _assert_exact(_frame(table), expected)
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert all(r.in_sink_log for r in audit.batches) and sum(r.rows or 0 for r in audit.batches) == len(expected)
    return len(table.metadata.snapshots)


def test_a_hadoop_catalog_on_azurite_works_for_one_writer_and_the_run_warns_so(
    wasb_store: SparkStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in wasb_store.env.items():  # after the s3a test, whose fixture cleared Azure's variables
        monkeypatch.setenv(name, value)
    data = _events(tmp_path)
    warehouse = f"{wasb_store.new_root()}/warehouse"
    sink = {
        "format": "iceberg",
        "path": None,
        "table": "lake.clicks",
        "catalog": {"type": "hadoop", "warehouse": warehouse},
    }
    config = write_config(tmp_path, pipeline={"name": "ice-hadoop-wasb"}, sink=sink)

    done = _command("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if WARNING_CODE in line]
    assert len(warned) == 1, done.stderr[-3000:]
    assert "single writer" in warned[0] or "only writer" in warned[0], warned

    # The table's folder on the store, read as pyiceberg reads a Hadoop catalog's table: its version hint.
    folder = open_storage(f"{warehouse}/lake/clicks")
    hint = folder.read_bytes("metadata/version-hint.text")
    assert hint is not None
    metadata = folder.uri(f"metadata/v{int(hint.strip())}.metadata.json")
    assert urlsplit(metadata).scheme == "wasbs"
    table = StaticTable.from_metadata(metadata, properties=_file_io(wasb_store))
    _assert_exact(_frame(table), _expected(list(data.files)))


def test_a_hadoop_catalog_on_s3_is_exact_through_a_lost_checkpoint_and_each_run_warns_once(
    s3a_store: SparkStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3a_store.env.items():  # after the Azurite test, which set its own store's variables
        monkeypatch.setenv(name, value)
    data = _events(tmp_path)
    expected = _expected(list(data.files))
    warehouse = f"{s3a_store.new_root()}/warehouse"
    sink = {
        "format": "iceberg",
        "path": None,
        "table": "lake.clicks",
        "catalog": {"type": "hadoop", "warehouse": warehouse},
    }
    config = write_config(tmp_path, pipeline={"name": "ice-hadoop-s3a"}, sink=sink)
    io = load_file_io(_file_io(s3a_store), warehouse)

    def read() -> Table:
        """The table as pyiceberg reads a Hadoop catalog's table, with its own S3 FileIO: its version hint names
        its newest metadata file."""
        metadata = f"{warehouse}/lake/clicks/metadata"
        with io.new_input(f"{metadata}/version-hint.text").open() as hint:
            version = int(hint.read().strip())
        return StaticTable.from_metadata(f"{metadata}/v{version}.metadata.json", properties=_file_io(s3a_store))

    def warned_once(stderr: str) -> None:
        warned = [line for line in stderr.splitlines() if WARNING_CODE in line]
        assert len(warned) == 1, stderr[-3000:]
        assert "only writer" in warned[0] and warehouse in warned[0], warned

    done = _command("run", str(config), "--available-now")
    assert done.returncode == 0, done.stderr[-3000:]
    warned_once(done.stderr)
    table = read()
    # Every file of the table is on S3, below the warehouse (nothing local).
    assert urlsplit(table.metadata_location).scheme == "s3a", table.metadata_location
    assert all(p.startswith(f"{warehouse}/lake/clicks/") for p in table.inspect.files().column("file_path").to_pylist())
    snapshots = _exact_nothing_local_and_audited(table, config, expected, tmp_path)

    # The checkpoint lost: recover reads the windows the table holds on S3 and replays none of them twice.
    shutil.rmtree(tmp_path / "checkpoint")
    recovered = _command("recover", str(config), "--apply")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert "verified" in recovered.stdout and "0 duplicate" in recovered.stdout, recovered.stdout
    again = read()
    _assert_exact(_frame(again), expected)
    assert len(again.metadata.snapshots) >= snapshots

    # A run afterwards, on the recovery's checkpoint: nothing new, nothing twice, and the warning once more.
    ran = _command("run", str(config), "--available-now")
    assert ran.returncode == 0, ran.stderr[-3000:]
    warned_once(ran.stderr)
    _assert_exact(_frame(read()), expected)
    assert audit_sink(load_config(config)).ok
