"""The lifecycle layer on a real Spark: sessions vs pandas, state removal read back from the store, clamping, leaks."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig
from tidemark.config.model import ROCKSDB_PROVIDER
from tidemark.stateful import LeakGuard

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stateful"
T0 = datetime(2024, 1, 1, tzinfo=UTC)
GAP = timedelta(minutes=10)
DELAY = timedelta(minutes=5)
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
TRACK_ROWS_KEY = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"

# (user, minutes after T0) per file; one file per micro-batch. No event is behind its batch's watermark.
SESSION_FILES: list[list[tuple[str, int]]] = [
    [("a", 0), ("a", 3), ("b", 1), ("c", 2)],
    [("a", 8), ("b", 20), ("c", 12), ("d", 15)],  # c@12 is exactly gap after c@2: the same session
    [("a", 30), ("d", 16), ("b", 22), ("e", 40)],
    [("z", 70), ("c", 65)],
]
STOPPED_KEYS = {"a", "b", "d", "e"}  # no event after their last session, which the final watermark has passed
OPEN_KEYS = {"c", "z"}


def _write_files(folder: Path, files: list[list[tuple[str, int]]]) -> None:
    folder.mkdir(parents=True)
    for index, rows in enumerate(files):
        path = folder / f"part-{index:03d}.json"
        lines = [json.dumps({"user": u, "ts": (T0 + timedelta(minutes=m)).isoformat()}) for u, m in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))  # the file source orders by mtime


def _events(spark: SparkSession, folder: Path) -> DataFrame:
    stream = spark.readStream.schema("user STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(str(folder))
    return stream.withWatermark("ts", f"{int(DELAY.total_seconds())} seconds")


def _run(frame: DataFrame, checkpoint: Path, name: str) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    query = (
        frame.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    progress = [json.loads(p.json) for p in query.recentProgress]
    result = frame.sparkSession.sql(f"SELECT * FROM {name}").toPandas()
    return result, progress


def _config(processor: str, tmp: Path) -> TidemarkConfig:
    return TidemarkConfig.model_validate(
        {
            "pipeline": {"name": "stateful-test"},
            "source": {"format": "json", "path": str(tmp / "in"), "schema": "user STRING, ts STRING"},
            "event_time": {"column": "ts", "watermark": "5 minutes"},
            "aggregation": {"kind": "custom", "key": ["user"], "processor": processor},
            "sink": {"path": str(tmp / "out")},
            "checkpoint": {"location": str(tmp / "ckpt")},
            "quarantine": {"path": str(tmp / "quarantine")},
        }
    )


def pandas_sessions(files: list[list[tuple[str, int]]], gap: timedelta) -> pd.DataFrame:
    """Batch sessionization: a new session starts when the gap to the key's previous event exceeds gap."""
    rows = [(u, T0 + timedelta(minutes=m)) for batch in files for u, m in batch]
    frame = pd.DataFrame(rows, columns=["user", "ts"]).sort_values(["user", "ts"])
    starts = frame.groupby("user")["ts"].diff().isna() | (frame.groupby("user")["ts"].diff() > gap)
    frame["session"] = starts.cumsum()
    out = frame.groupby(["user", "session"]).agg(
        firstEventTime=("ts", "min"), lastEventTime=("ts", "max"), count=("ts", "size")
    )
    out = out.reset_index().drop(columns="session")
    out["sessionStart"] = out["firstEventTime"]
    out["sessionEnd"] = out["lastEventTime"] + gap
    return out


def _final_watermark(files: list[list[tuple[str, int]]]) -> datetime:
    return T0 + timedelta(minutes=max(m for batch in files for _, m in batch)) - DELAY


def _normalise(frame: pd.DataFrame) -> pd.DataFrame:
    columns = ["user", "sessionStart", "sessionEnd", "count", "firstEventTime", "lastEventTime"]
    frame = frame[columns].copy()
    for column in columns[1:]:
        if column != "count":
            frame[column] = pd.to_datetime(frame[column], utc=True)
    frame["count"] = frame["count"].astype("int64")
    return frame.sort_values(["user", "sessionStart"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def rocksdb(spark: SparkSession) -> Iterator[SparkSession]:
    """The shared session with the RocksDB provider transformWithStateInPandas needs; restored afterwards."""
    # RocksDB counting the rows in state: the leak guard watches numRowsTotal (Spark's default, set here so that
    # no earlier test's setting of the shared session decides it).
    wanted = {PROVIDER_KEY: ROCKSDB_PROVIDER, TRACK_ROWS_KEY: "true"}
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    sys.path.insert(0, str(FIXTURES))
    try:
        yield spark
    finally:
        sys.path.remove(str(FIXTURES))
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@pytest.fixture(scope="module")
def session_runs(rocksdb: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both session engines over the same four files, run once for the module."""
    from tidemark.pipeline.transforms.session import build_lifecycle, build_native

    tmp = tmp_path_factory.mktemp("sessions")
    _write_files(tmp / "in", SESSION_FILES)
    runs: dict[str, Any] = {}
    for engine, build in (("lifecycle", build_lifecycle), ("native", build_native)):
        frame = build(_events(rocksdb, tmp / "in"), ["user"], "ts", GAP)
        result, progress = _run(frame, tmp / f"ckpt-{engine}", f"stateful_sessions_{engine}")
        runs[engine] = {"result": result, "progress": progress, "checkpoint": tmp / f"ckpt-{engine}"}
    return runs


@pytest.mark.parametrize("engine", ["lifecycle", "native"])
def test_sessions_equal_pandas_sessionization(session_runs: dict[str, Any], engine: str) -> None:
    expected = pandas_sessions(SESSION_FILES, GAP)
    closed = expected[expected["sessionEnd"] <= _final_watermark(SESSION_FILES)]
    assert 0 < len(closed) < len(expected)  # some sessions closed, some still open: the cut is exercised
    actual = _normalise(session_runs[engine]["result"])
    pd.testing.assert_frame_equal(actual, _normalise(closed))


def test_stopped_keys_have_no_state_rows_after_their_session_closes(
    rocksdb: SparkSession, session_runs: dict[str, Any]
) -> None:
    checkpoint = str(session_runs["lifecycle"]["checkpoint"])
    state = rocksdb.read.format("statestore").option("stateVarName", "state").load(checkpoint)
    keys_with_state = {row["key"]["user"] for row in state.select("key").collect()}
    assert keys_with_state == OPEN_KEYS
    timers = rocksdb.read.format("statestore").option("readRegisteredTimers", "true").load(checkpoint)
    keys_with_timers = {row["key"]["user"] for row in timers.select("key").collect()}
    assert keys_with_timers == OPEN_KEYS
    assert not (keys_with_state | keys_with_timers) & STOPPED_KEYS


def test_expiry_behind_the_watermark_is_clamped_not_an_error(rocksdb: SparkSession, tmp_path: Path) -> None:
    from tidemark.pipeline.transforms import custom

    files = [[("a", 0), ("b", 1)], [("a", 20), ("c", 21)]]
    _write_files(tmp_path / "in", files)
    frame = custom.build(_events(rocksdb, tmp_path / "in"), _config("stateful_processors:PastExpiry", tmp_path))
    result, progress = _run(frame, tmp_path / "ckpt", "stateful_clamped")
    # Batch 1's watermark is the newest event of batch 0 minus the delay; batch 0's is 0 (no event seen yet).
    batch1_watermark_ms = int((T0 + timedelta(minutes=1) - DELAY).timestamp() * 1000)
    expected = pd.DataFrame(
        {
            "user": ["a", "a", "b", "c"],
            "events": [1, 1, 1, 1],
            "watermarkMs": [0, batch1_watermark_ms, 0, batch1_watermark_ms],
        }
    )
    result = result.sort_values(["user", "watermarkMs"]).reset_index(drop=True)
    assert (
        result[["user", "events", "watermarkMs"]].astype({"events": "int64", "watermarkMs": "int64"}).equals(expected)
    )
    assert (result["firedMs"] == result["watermarkMs"]).all()  # fired at the watermark, not at the request
    assert (result["requestedMs"] < result["firedMs"]).all()
    assert LeakGuard(batches=2).observe(progress[-1]) == []


def test_processor_that_never_removes_state_triggers_the_leak_warning(rocksdb: SparkSession, tmp_path: Path) -> None:
    from tidemark.pipeline.transforms import custom

    # Two new users per file and a watermark that moves forward every batch.
    files = [[(f"u{i}a", 10 * i), (f"u{i}b", 10 * i + 1)] for i in range(5)]
    _write_files(tmp_path / "in", files)
    frame = custom.build(_events(rocksdb, tmp_path / "in"), _config("stateful_processors:NeverRemoves", tmp_path))
    _, progress = _run(frame, tmp_path / "ckpt", "stateful_leaky")
    guard = LeakGuard(batches=3)
    warnings = [warning for batch in progress for warning in guard.observe(batch)]
    assert len(warnings) == 1
    warning = warnings[0]
    assert warning.operator_index == 0
    assert warning.operator_name == progress[0]["stateOperators"][0]["operatorName"]
    assert "transformWithState" in warning.operator_name
    assert warning.rows_now > warning.rows_before
    assert warning.operator_name in warning.message
