"""State inspection on real checkpoints: counts vs Spark's own reader, diff vs the rows written, expired vs leaks."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from tidemark.cli.main import main
from tidemark.errors import CheckpointError
from tidemark.session import runtime_conf
from tidemark.statestore.diff import DiffMethod, diff_state
from tidemark.statestore.expired import ExpiredReason, find_expired
from tidemark.statestore.show import ExportFormat, show_state
from tidemark.statestore.stats import state_stats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CONFS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Without no-data batches the last batch's watermark is committed but never applied: the leak the tests need.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}
# Three micro-batches, one file each. Event time in seconds after 2024-01-01T00:00:00Z.
BATCHES: list[list[tuple[str, int]]] = [
    [("a", 0), ("leak1", 1), ("b", 2)],
    [("c", 60), ("a", 3)],
    [("d", 120)],
]
T0_MS = 1_704_067_200_000
TIMEOUT_S = 5  # both stateful functions set their timeout/timer at max event time + 5 s


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoints the module builds once."""

    group_state: Path  # applyInPandasWithState, event-time timeout
    timers: Path  # transformWithStateInPandas, value states + event-time timers
    window: Path  # window aggregation
    legacy: Path  # window aggregation with its operator metadata removed (as written by Spark 3.5)


def _count_fn(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    if state.hasTimedOut:
        if not str(key[0]).startswith("leak"):
            state.remove()
        return
    total, latest = 0, None
    for pdf in pdfs:
        total += len(pdf)
        top = pdf["ts"].max()
        latest = top if latest is None or top > latest else latest
    previous = state.get[0] if state.exists else 0
    state.update((previous + total,))
    state.setTimeoutTimestamp(int(latest.timestamp() * 1000) + TIMEOUT_S * 1000)
    yield pd.DataFrame({"key": [key[0]], "n": [previous + total]})


def _processor() -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", "n long")
            self.last = handle.getValueState("last", "ts long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
            n = self.count.get()[0] if self.count.exists() else 0
            latest = 0
            for pdf in rows:
                n += len(pdf)
                latest = max(latest, int(pdf["ts"].max().timestamp() * 1000))
            self.count.update((n,))
            self.last.update((latest,))
            self.handle.registerTimer(latest + TIMEOUT_S * 1000)
            yield pd.DataFrame({"key": [key[0]], "n": [n]})

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            if not str(key[0]).startswith("leak"):
                self.count.clear()
                self.last.clear()
            yield pd.DataFrame({"key": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    return Counter()


def _write_batch(folder: Path, index: int, rows: list[tuple[str, int]]) -> None:
    frame = pd.DataFrame(
        {"key": [k for k, _ in rows], "ts": [pd.Timestamp(T0_MS + s * 1000, unit="ms", tz="UTC") for _, s in rows]}
    )
    tmp = folder / f".{index}.json"
    frame.to_json(tmp, orient="records", lines=True, date_format="iso")
    tmp.rename(folder / f"{index}.json")


def _run_once(plan: Any, checkpoint: Path, attempts: int = 3) -> None:
    """Run the query until the files present are processed; on a busy machine Python workers may fail to
    connect back in time, so a failed run is restarted from its checkpoint (it redoes the same batch)."""
    from pyspark.errors import StreamingQueryException

    for attempt in range(attempts):
        writer = plan.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(checkpoint))
        query = writer.trigger(availableNow=True).start()
        try:
            query.awaitTermination()
            return
        except StreamingQueryException:
            if attempt == attempts - 1:
                raise
        finally:
            query.stop()


@pytest.fixture(scope="module")
def checkpoints(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkpoints]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    base = tmp_path_factory.mktemp("state")
    source = base / "in"
    source.mkdir()
    with runtime_conf(spark, CONFS):
        events = spark.readStream.schema("key string, ts timestamp").json(str(source)).withWatermark("ts", "10 seconds")
        plans = {
            "group_state": events.groupBy("key").applyInPandasWithState(
                _count_fn, "key string, n long", "n long", "Update", GroupStateTimeout.EventTimeTimeout
            ),
            "timers": events.groupBy("key").transformWithStateInPandas(
                _processor(), "key string, n long", "Update", "EventTime"
            ),
            "window": events.groupBy(F.window("ts", "1 minute"), "key").count(),
        }
        for index, rows in enumerate(BATCHES):
            _write_batch(source, index, rows)
            for name, plan in plans.items():
                # One query at a time, started per batch: each start plans exactly the one new file.
                _run_once(plan, base / name)
    legacy = base / "legacy"
    shutil.copytree(base / "window", legacy)
    shutil.rmtree(legacy / "state" / "0" / "_metadata")
    yield Checkpoints(base / "group_state", base / "timers", base / "window", legacy)


def _spark_counts(spark: SparkSession, path: Path, **options: str) -> dict[int, int]:
    frame = spark.read.format("statestore").options(**options).load(str(path))
    return {int(r["partition_id"]): int(r["count"]) for r in frame.groupBy("partition_id").count().collect()}


def test_every_checkpoint_committed_three_batches(checkpoints: Checkpoints) -> None:
    for path in (checkpoints.group_state, checkpoints.timers, checkpoints.window):
        assert sorted(p.name for p in (path / "commits").iterdir() if p.name.isdigit()) == ["0", "1", "2"]


def test_stats_counts_equal_sparks_reader(spark: SparkSession, checkpoints: Checkpoints) -> None:
    for path in (checkpoints.group_state, checkpoints.window):
        result = state_stats(path)
        (op,) = result.operators
        expected = _spark_counts(spark, path)
        assert {p.id: p.rows for p in op.partitions if p.rows} == expected
        assert len(op.partitions) == 2
        assert op.rows == sum(expected.values())
        assert op.approx_bytes > 0
    # By hand: group state keeps leak1, c, d; windows keep (0-1 min: a, leak1, b), (1-2: c), (2-3: d).
    assert state_stats(checkpoints.group_state).operators[0].rows == 3
    assert state_stats(checkpoints.window).operators[0].rows == 5


def test_stats_of_transform_with_state(spark: SparkSession, checkpoints: Checkpoints) -> None:
    (op,) = state_stats(checkpoints.timers).operators
    variables = {v.name: v.rows for v in op.state_variables}
    assert variables == {
        "count": sum(_spark_counts(spark, checkpoints.timers, stateVarName="count").values()),
        "last": sum(_spark_counts(spark, checkpoints.timers, stateVarName="last").values()),
    }
    assert variables == {"count": 3, "last": 3}  # leak1, c, d
    assert op.timers == sum(_spark_counts(spark, checkpoints.timers, readRegisteredTimers="true").values()) == 2
    assert op.rows == 6


def test_stats_at_an_earlier_batch(checkpoints: Checkpoints) -> None:
    # After batch 1 nothing had timed out: a, leak1, b, c.
    assert state_stats(checkpoints.group_state, batch=1).operators[0].rows == 4


def test_legacy_checkpoint_says_which_options_it_needs(checkpoints: Checkpoints) -> None:
    result = state_stats(checkpoints.legacy)
    (op,) = result.operators
    assert result.metadata.value == "folders"
    assert op.note is not None and "--operator 0 --store default" in op.note
    assert op.rows == 5
    rows = show_state(checkpoints.legacy, operator=0, store="default", limit=None)
    assert len(rows.rows) == 5


def _key_set(changes: Any, kind: str) -> set[str]:
    return {c.key["key"] for c in changes.samples if c.change.value == kind}


@pytest.mark.parametrize("method", [None, DiffMethod.SNAPSHOTS])
def test_diff_matches_the_rows_the_test_changed(checkpoints: Checkpoints, method: DiffMethod | None) -> None:
    first = diff_state(checkpoints.group_state, 0, 1, sample=10, method=method)
    (store,) = first.stores
    assert store.method is (method or DiffMethod.CHANGE_FEED)
    # Batch 1 wrote c (new) and a (second event).
    assert (store.added, store.updated, store.removed) == (1, 1, 0)
    assert _key_set(store, "added") == {"c"}
    assert _key_set(store, "updated") == {"a"}
    (updated,) = [c for c in store.samples if c.change.value == "updated"]
    assert updated.before["groupState"]["n"] == 1 and updated.after["groupState"]["n"] == 2
    # Batch 2 wrote d; its watermark timed out a and b (removed) and leak1 (kept as it was).
    (store,) = diff_state(checkpoints.group_state, 1, 2, sample=10, method=method).stores
    assert (store.added, store.updated, store.removed) == (1, 0, 2)
    assert _key_set(store, "added") == {"d"} and _key_set(store, "removed") == {"a", "b"}


@pytest.mark.parametrize(("start", "sample"), [(0, 1), (1, 1), (0, 2)])
def test_diff_samples_each_kind_it_counts(checkpoints: Checkpoints, start: int, sample: int) -> None:
    """K samples of EACH kind (docs/state.md), whatever the mix of kinds."""
    (store,) = diff_state(checkpoints.group_state, start, 2, sample=sample).stores
    counts = {"added": store.added, "updated": store.updated, "removed": store.removed}
    shown = {kind: len([c for c in store.samples if c.change.value == kind]) for kind in counts}
    assert shown == {kind: min(sample, n) for kind, n in counts.items()}, (counts, store.samples)
    assert store.removed > 0  # the kind the old sampling dropped behind the added keys


def test_diff_of_window_state_by_snapshots(checkpoints: Checkpoints) -> None:
    (store,) = diff_state(checkpoints.window, 0, 2, sample=10, method=DiffMethod.SNAPSHOTS).stores
    # Windows added after batch 0: (1-2 min, c), (2-3 min, d); (0-1 min, a) went from 1 to 2 rows.
    assert (store.added, store.updated, store.removed) == (2, 1, 0)


def test_expired_finds_the_group_state_keys_left_behind(checkpoints: Checkpoints) -> None:
    report = find_expired(checkpoints.group_state)
    assert report.batch == 2
    assert report.batch_watermark_ms == T0_MS + (60 - 10) * 1000
    assert report.committed_watermark_ms == T0_MS + (120 - 10) * 1000
    (op,) = report.operators
    found = {k.key["key"]: k.reason for k in op.keys}
    # leak1 timed out in batch 2 and its function kept it; c's timeout (65 s) is behind the committed
    # watermark (110 s) but no batch ran after it.
    assert found == {"leak1": ExpiredReason.FIRED_NOT_REMOVED, "c": ExpiredReason.OVERDUE}
    assert {k.key["key"]: k.timeout_ms for k in op.keys} == {"leak1": T0_MS + 6000, "c": T0_MS + 65000}
    assert op.keys_with_state == 3 and op.expired == 2


def test_expired_finds_the_timer_keys_left_behind(checkpoints: Checkpoints) -> None:
    (op,) = find_expired(checkpoints.timers).operators
    found = {k.key["key"]: k.reason for k in op.keys}
    # leak1's timer fired and its handler kept the state; c's timer (65 s) waits behind the watermark.
    assert found == {"leak1": ExpiredReason.NO_TIMER, "c": ExpiredReason.OVERDUE}
    assert op.by_reason == {"NO_TIMER": 1, "OVERDUE": 1}


def test_show_flattens_and_filters(checkpoints: Checkpoints, tmp_path: Path) -> None:
    rows = show_state(checkpoints.group_state, key="key.key = 'leak1'")
    assert rows.columns == ("key_key", "value_groupState_n", "value_timeoutTimestamp", "partition_id")
    assert [r[:3] for r in rows.rows] == [("leak1", 1, T0_MS + 6000)]
    timers = show_state(checkpoints.timers, store="$timers")
    assert sorted(r[0] for r in timers.rows) == ["c", "d"]
    out = tmp_path / "last.csv"
    show_state(checkpoints.timers, store="last", limit=None, export=ExportFormat.CSV, output=out)
    assert set(pd.read_csv(out)["key_key"]) == {"leak1", "c", "d"}


def test_cli_stats_json_and_errors(checkpoints: Checkpoints, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state", "stats", str(checkpoints.window), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    (op,) = payload["operators"]
    assert {"id", "name", "store", "rows", "partitions"} <= set(op)
    assert op["rows"] == 5 and sum(p["rows"] for p in op["partitions"]) == 5
    assert main(["state", "stats", str(checkpoints.window), "--batch", "9"]) == 1
    assert "not a committed batch" in capsys.readouterr().err
    with pytest.raises(CheckpointError):
        state_stats(checkpoints.window.parent / "missing")
