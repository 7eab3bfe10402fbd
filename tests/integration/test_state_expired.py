"""`state expired` for the operators the watermark evicts: windows, sessions and dropDuplicates.

Each query runs three batches without no-data batches, so the last batch's committed watermark is never applied
and the rows behind it stay in state. Which rows those are is computed here from the input with pandas and the
two watermarks read straight from the checkpoint's offset and commit files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.streaming_queries import HDFS, ROCKSDB, SCHEMA, run_query, windowed, write_input
from tidemark.cli.main import main
from tidemark.statestore.expired import ExpiredReason, find_expired

pytestmark = [pytest.mark.integration, pytest.mark.slow]
GAP = timedelta(seconds=10)
MINUTE = timedelta(minutes=1)


def sessions(frame: Any) -> Any:
    """Session windows with a gap shorter than the events' spacing, so sessions close within each minute."""
    from pyspark.sql import functions as F

    grouped = frame.withWatermark("ts", "1 minute").groupBy(F.session_window("ts", "10 seconds"), "k").count()
    return grouped.select(F.col("session_window.start").alias("start"), "k", "count")


def dedup(frame: Any) -> Any:
    return frame.withWatermark("ts", "1 minute").dropDuplicates(["k", "ts"])


QUERIES: dict[str, tuple[Callable[[Any], Any], str]] = {"window": (windowed, HDFS), "session": (sessions, ROCKSDB)}
QUERIES["dedup"] = (dedup, HDFS)


@pytest.fixture(scope="module")
def checkpoints(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("expired")
    write_input(root / "input", range(3))
    for index, file in enumerate(sorted((root / "input").iterdir())):
        os.utime(file, (1_700_000_000 + index, 1_700_000_000 + index))  # read in minute order, one per batch
    made = {}
    for name, (build, provider) in QUERIES.items():
        run_query(spark, root / "input", build, root / name, root / f"{name}_out", (provider, "false", "1", "false"))
        made[name] = root / name
    return made


def _events(checkpoint: Path) -> pd.DataFrame:
    frames = [pd.read_json(p, lines=True) for p in sorted((checkpoint.parent / "input").glob("*.json"))]
    events = pd.concat(frames)
    events["ts"] = pd.to_datetime(events["ts"], utc=True)
    return events


def _marks(checkpoint: Path) -> tuple[int, datetime, datetime]:
    """(last batch, its watermark, the watermark it committed for the next batch), read from the log files."""
    batch = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    offsets = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[1])
    commit = json.loads((checkpoint / "commits" / str(batch)).read_text().splitlines()[1])
    as_time = lambda ms: pd.Timestamp(ms, unit="ms", tz="UTC").to_pydatetime()  # noqa: E731
    return batch, as_time(offsets["batchWatermarkMs"]), as_time(commit["nextBatchWatermarkMs"])


def _session_ends(events: pd.DataFrame) -> list[tuple[str, datetime]]:
    """Spark's session windows: an event at or before the session's end (last event + gap) extends it."""
    ends = []
    for key, group in events.sort_values("ts").groupby("k"):
        end = None
        for ts in group["ts"]:
            if end is not None and ts <= end:
                end = max(end, ts + GAP)
                continue
            if end is not None:
                ends.append((str(key), end.to_pydatetime()))
            end = ts + GAP
        ends.append((str(key), end.to_pydatetime()))
    return ends


def expected_overdue(name: str, checkpoint: Path) -> int:
    """Rows whose eviction time passed the committed watermark but not the one their last batch evicted with."""
    _, batch_wm, committed_wm = _marks(checkpoint)
    events = _events(checkpoint)
    if name == "window":
        ends = [
            (k, (ts.floor("1min") + MINUTE).to_pydatetime()) for k, ts in zip(events["k"], events["ts"], strict=True)
        ]
        times = [end for _, end in set(ends)]
    elif name == "session":
        times = [end for _, end in _session_ends(events)]
    else:
        times = [ts.to_pydatetime() for ts in events.drop_duplicates(["k", "ts"])["ts"]]
    return sum(1 for t in times if batch_wm < t <= committed_wm)


@pytest.mark.parametrize("name", list(QUERIES))
def test_expired_counts_the_rows_the_committed_watermark_passed(name: str, checkpoints: dict[str, Path]) -> None:
    checkpoint = checkpoints[name]
    batch, batch_wm, committed_wm = _marks(checkpoint)
    assert committed_wm > batch_wm, "the case needs rows behind the committed watermark"
    expected = expected_overdue(name, checkpoint)
    assert expected > 0
    report = find_expired(checkpoint)
    assert report.batch == batch
    (op,) = report.operators
    assert op.checked and op.kind == ("dedup" if name == "dedup" else name)
    assert op.expired == expected
    assert op.by_reason == {ExpiredReason.OVERDUE.value: expected}
    assert all(batch_wm.timestamp() * 1000 < (k.timeout_ms or 0) <= committed_wm.timestamp() * 1000 for k in op.keys)


def test_cli_says_the_watermark_as_time(checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, batch_wm, committed_wm = _marks(checkpoints["window"])
    assert main(["state", "expired", str(checkpoints["window"])]) == 0
    out = capsys.readouterr().out
    assert f"watermark {batch_wm:%Y-%m-%dT%H:%M:%S}.000Z" in out
    assert f"committed for the next batch {committed_wm:%Y-%m-%dT%H:%M:%S}.000Z" in out
    assert "OVERDUE: key=" in out and " at 2024-01-01T" in out
    assert main(["state", "expired", str(checkpoints["window"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["committed_watermark_ms"] == int(committed_wm.timestamp() * 1000)


SCHEMA_USED = SCHEMA  # the input's schema (tests.streaming_queries), named here for readers
