"""The Iceberg sink through a JDBC catalog on a real MariaDB (tests/mariadb.py), its warehouse on local disk.

`tidemark run` and `recover` run in this process, on the tests' shared session (Iceberg's runtime and MariaDB's
driver from tidemark's lock, tests/conftest.py), the user and password from ICEBERG_JDBC_USER /
ICEBERG_JDBC_PASSWORD. The table is read back by the test's own pyiceberg SQL catalog on the same database (never
with tidemark) and compared with the pandas oracle.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from tests.helpers import write_config
from tests.integration.test_recovery import _expected
from tests.mariadb import IcebergDatabase
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEY = ["user", "windowStart"]


def other_writer(spark: SparkSession, db: IcebergDatabase, warehouse: Path) -> None:
    """Another application appending to the table through the same JDBC catalog (the catalog's name is part of each
    of its rows, so the same name), in a session of its own (a new session of the shared Spark: its own settings
    and catalogs)."""
    theirs_session = spark.newSession()
    c = "spark.sql.catalog.tidemark_iceberg"
    settings = {
        c: "org.apache.iceberg.spark.SparkCatalog",
        f"{c}.type": "jdbc",
        f"{c}.uri": db.jdbc_uri,
        f"{c}.warehouse": str(warehouse),
        f"{c}.jdbc.user": db.user,
        f"{c}.jdbc.password": db.password,
        f"{c}.jdbc.schema-version": "V1",
    }
    for key, value in settings.items():
        theirs_session.conf.set(key, value)
    theirs = theirs_session.table("tidemark_iceberg.lake.clicks").limit(2)
    theirs = theirs.selectExpr("concat('other-', user) AS user", "* EXCEPT (user)")
    theirs.writeTo("tidemark_iceberg.lake.clicks").option("snapshot-property.tidemark.app", "someone-else").append()


def _read(db: IcebergDatabase) -> Table:
    """The table as the test's own pyiceberg SQL catalog reads it from the catalog's database."""
    uri = f"mysql+pymysql://{db.user}:{db.password}@127.0.0.1:{db.mariadb.port}/{db.database}"
    catalog = SqlCatalog("tidemark_iceberg", uri=uri, init_catalog_tables="false")
    try:
        return catalog.load_table("lake.clicks")
    finally:
        catalog.engine.dispose()


def _rows(db: IcebergDatabase) -> pd.DataFrame:
    frame = _read(db).scan().to_arrow().to_pandas()
    frame["windowStart"] = pd.to_datetime(frame["windowStart"], utc=True)
    return frame.sort_values(KEY).reset_index(drop=True)


def _assert_exact(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert not actual.duplicated(KEY).any(), actual[actual.duplicated(KEY, keep=False)]
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6


def test_a_jdbc_catalog_table_is_exact_through_a_lost_checkpoint_and_another_writer_is_told_apart(
    iceberg_session: SparkSession,
    tmp_path: Path,
    iceberg_mariadb: IcebergDatabase,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = iceberg_mariadb
    for name, value in db.env.items():
        monkeypatch.setenv(name, value)  # the commands and audit read them from the environment

    def command(*argv: str) -> tuple[int, str, str]:
        """A tidemark command in this process: its exit code, stdout and stderr (this process's descriptors)."""
        capfd.readouterr()
        caplog.clear()
        code = main(list(argv))
        out, err = capfd.readouterr()
        assert db.password not in out + err + caplog.text  # the secret is never printed, nor logged
        return code, out, err

    data = generate_events(tmp_path / "all", events=200, keys=3, files=2, seed=11)
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    for file in files:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    catalog = {"type": "jdbc", "warehouse": "warehouse", "uri": db.jdbc_uri}
    sink = {"format": "iceberg", "path": None, "table": "lake.clicks", "catalog": catalog}
    config = write_config(tmp_path, sink=sink)
    expected = _expected(files)

    code, _, err = command("run", str(config), "--available-now")
    assert code == 0, err[-2000:]
    _assert_exact(_rows(db), expected)
    # The catalog names the table's metadata file (a Hadoop catalog's version-hint.text is not there); its folder is
    # the JDBC catalog's default, <warehouse>/<namespace>/<table>.
    table = _read(db)
    assert table.metadata_location.removeprefix("file:").startswith(str(tmp_path / "warehouse" / "lake" / "clicks"))
    assert not (tmp_path / "warehouse" / "lake" / "clicks" / "metadata" / "version-hint.text").exists()
    commits = {int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*")}
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert [r.batch for r in audit.batches] == sorted(commits) and all(r.in_sink_log for r in audit.batches)
    assert sum(r.rows or 0 for r in audit.batches) == len(expected)
    # checkpoint inspect --sink: the table's folder cannot say which metadata file is current (the catalog does):
    # refused in one line; the metadata file the catalog names is read as given.
    argv = ["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--sink"]
    code, _, err = command(*argv, str(tmp_path / "warehouse" / "lake" / "clicks"))
    refusal = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(refusal) == 1 and "has no version-hint.text" in refusal[0], refusal
    code, out, _ = command(*argv, table.metadata_location, "--json")
    assert code == 0
    report = json.loads(out)["sink"]
    assert (report["files"], report["rows"]) == (table.inspect.files().num_rows, len(expected))
    assert (report["snapshots"], report["last_batch"]) == (len(table.metadata.snapshots), max(commits))
    assert report["metadata_file"] == table.metadata_location

    # The checkpoint lost: recover reads the windows the table holds through the catalog and replays none twice.
    current = table.current_snapshot()
    assert current is not None
    shutil.rmtree(tmp_path / "checkpoint")
    code, out, err = command("recover", str(config), "--apply")
    assert code == 0, err[-2000:]
    assert "verified" in out and "0 duplicate" in out, out
    _assert_exact(_rows(db), expected)
    assert (tmp_path / ".tidemark-archive" / "checkpoint-recovery").is_dir()
    assert not (tmp_path / "warehouse" / "lake" / ".tidemark-archive").exists()

    # Another application appends through the same catalog: audit counts its snapshot apart, not as a violation.
    other_writer(iceberg_session, db, tmp_path / "warehouse")
    rows = _rows(db)
    assert len(rows) == len(expected) + 2 and rows["user"].str.startswith("other-").sum() == 2
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
    assert any("1 snapshot(s) by other writers (someone-else)" in n for n in audit.notes), audit.notes
    _assert_exact(rows[~rows["user"].str.startswith("other-")].reset_index(drop=True), expected)
