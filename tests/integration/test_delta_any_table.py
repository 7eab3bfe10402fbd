"""Exactly once into Delta on tables users have (#55): after a lost checkpoint, `recover --apply` reads which windows
the table holds from the table itself (partition values, or the rows with deletion vectors applied), never from its
file names, and replays only the windows it lacks.

Each table is read back with delta-rs and compared with the pandas oracle of every event (changed the way the
user changed the table): every (key, window) once. Each run is `tidemark run` in its own process (the tests'
shared session has no Delta jars).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.helpers import write_config
from tests.integration.test_delta_sink import KEY, _cli, _run, _table
from tests.integration.test_recovery import _expected
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.recovery.audit import audit_sink

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The first `tidemark run`, then the user's own change to the table in the same process (Spark's active session,
# with Delta's jars: the run leaves it running, as a notebook has it). The change is setup, not the thing under
# test: one JVM instead of a second one started for three SQL statements.
_RUN_THEN_CHANGE = """
import sys
from pyspark.sql import SparkSession
from tidemark.cli.main import main

config, table, *statements = sys.argv[1:]
code = main(["run", config, "--available-now"])
if code != 0:
    sys.exit(code)
spark = SparkSession.getActiveSession()
for statement in statements:
    spark.sql(statement.format(table=f"delta.`{table}`"))
"""


def _run_then_change(config: Path, table: Path, *statements: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN_THEN_CHANGE, str(config), str(table), *statements],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _land(files: list[Path], landing: Path) -> None:
    for file in files:
        shutil.copy2(file, landing / file.name)


def _exact(table: Path, expected: pd.DataFrame) -> None:
    actual = _table(table)
    assert not actual.duplicated(KEY).any(), actual[actual.duplicated(KEY, keep=False)][KEY]
    merged = actual.merge(expected, on=KEY, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][KEY]
    assert (merged["count"] == merged["count_oracle"]).all(), merged[merged["count"] != merged["count_oracle"]]


def _changed(expected: pd.DataFrame, users: list[str], oldest: pd.Timestamp) -> pd.DataFrame:
    """The oracle changed as the user changed the table: users[0]'s oldest window deleted, users[1]'s +1000."""
    kept = expected[~((expected["user"] == users[0]) & (expected["windowStart"] == oldest))].copy()
    kept.loc[(kept["user"] == users[1]) & (kept["windowStart"] == oldest), "count"] += 1000
    return kept.reset_index(drop=True)


def _recover(config: Path) -> dict[str, object]:
    """`recover --apply --json`: its plan and verification."""
    done = _cli(["recover", str(config), "--apply", "--json"])
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_a_window_partitioned_table_with_random_prefixes_and_deletion_vectors_recovers_exactly(
    tmp_path: Path,
) -> None:
    """Partitioned by windowStart in Delta's metadata, but no `windowStart=` folders (delta.randomizeFilePrefixes);
    deletion vectors on, and rows of the oldest window deleted and updated by the user after tidemark wrote them:
    audit sees no duplicate, and recover resumes after the newest window the table holds (the deleted rows stay
    deleted, the updated ones keep the user's value)."""
    data = generate_events(tmp_path / "all", events=400, keys=3, files=4, seed=17)
    files = list(data.files)
    landing = tmp_path / "landing"
    landing.mkdir()
    defaults = "spark.databricks.delta.properties.defaults"
    config = write_config(
        tmp_path,
        sink={"format": "delta", "path": "output"},
        spark={"conf": {f"{defaults}.randomizeFilePrefixes": "true", f"{defaults}.enableDeletionVectors": "true"}},
    )
    output = tmp_path / "output"
    _land(files[:2], landing)
    # The windows the first run writes, from the oracle (its watermark closes them): the user deletes one user's
    # row of the oldest window and updates another's, in the process of the run itself.
    first = _expected(files[:2])
    oldest = first["windowStart"].min()
    users = sorted(first.loc[first["windowStart"] == oldest, "user"])
    assert len(users) >= 2, first
    stamp = oldest.strftime("%Y-%m-%d %H:%M:%S")
    _run_then_change(
        config,
        output,
        f"DELETE FROM {{table}} WHERE user = '{users[0]}' AND windowStart = '{stamp}'",
        f"UPDATE {{table}} SET count = count + 1000 WHERE user = '{users[1]}' AND windowStart = '{stamp}'",
    )
    assert not any(p.name.startswith("windowStart=") for p in output.iterdir())  # random prefixes, no folders
    assert DeltaTable(str(output)).metadata().partition_columns == ["windowStart"]
    written = _changed(first, users, oldest)
    _exact(output, written)  # the run wrote the oracle's windows; the change is applied on read
    vectors = pa.table(DeltaTable(str(output)).deletion_vectors().read_all())
    assert vectors.num_rows >= 1, "the change wrote no deletion vector"
    audit = audit_sink(load_config(config))  # the updated row's old version is hidden by a deletion vector
    assert audit.ok, audit.violations

    _land(files[2:3], landing)
    shutil.rmtree(tmp_path / "checkpoint")
    plan = _recover(config)["plan"]
    assert isinstance(plan, dict) and pd.Timestamp(plan["newest_committed_window"]) == written["windowStart"].max()
    _land(files[3:], landing)
    done = _run(config)
    assert done.returncode == 0, done.stderr[-2000:]

    _exact(output, _changed(_expected(files), users, oldest))
    assert audit_sink(load_config(config)).ok


def test_a_table_partitioned_by_another_column_compacted_and_renamed_after_a_kill_recovers_exactly(
    tmp_path: Path,
) -> None:
    """Partitioned by user: a kill between Delta's commit and Spark's `commits/<n>`, the restart naming the table
    by a `file://` URI (the same table: the re-run batch is skipped, not appended again), an OPTIMIZE, then the
    checkpoint lost: recover reads the windows from the rows."""
    data = generate_events(tmp_path / "all", events=400, keys=3, files=4, seed=23)
    files = list(data.files)
    landing = tmp_path / "landing"
    landing.mkdir()
    output = tmp_path / "output"
    config = write_config(tmp_path, sink={"format": "delta", "path": "output", "partition_by": ["user"]})
    _land(files[:2], landing)
    killed = _run(config, kill_after_batch=1)
    assert killed.returncode == -9, killed.stderr[-2000:]
    held = DeltaTable(str(output)).transaction_version("tidemark:t")
    assert held == 1 and {p.name for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*")} == {"0"}

    renamed = write_config(
        tmp_path, sink={"format": "delta", "path": f"file://{output}", "partition_by": ["user"]}
    )  # same file, the spelling Spark and Hadoop print
    assert load_config(renamed).sink.path == f"file://{output}"
    _land(files[2:3], landing)
    again = _run(renamed)
    assert again.returncode == 0, again.stderr[-2000:]
    log = output / "_delta_log"
    versions = [
        json.loads(line)["txn"]["version"]
        for commit in sorted(log.glob("*.json"))
        for line in commit.read_text().splitlines()
        if line.startswith('{"txn"')
    ]
    assert versions.count(1) == 1 and len(versions) == len(set(versions)), versions

    DeltaTable(str(output)).optimize.compact()
    assert DeltaTable(str(output)).history(1)[0]["operation"] == "OPTIMIZE"
    shutil.rmtree(tmp_path / "checkpoint")
    recovered = _recover(renamed)
    verification = recovered["verification"]
    assert isinstance(verification, dict) and verification["duplicates"] == 0
    _land(files[3:], landing)
    done = _run(renamed)
    assert done.returncode == 0, done.stderr[-2000:]
    _exact(output, _expected(files))
    assert audit_sink(load_config(renamed)).ok
