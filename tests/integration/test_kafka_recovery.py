"""Kafka through failures: a corrupt and a lost checkpoint recovered, a rollback to a batch, data removed by
retention, and a broker outage in the middle of a run. Every case ends with the sink equal to the independent
oracle and no (key, window) twice in the raw Parquet.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests import helpers
from tests.helpers import progress_lines, read_sink, stop_before_the_no_data_batch, write_config
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import (
    Produced,
    final_windows_oracle,
    kafka_oracle,
    make_events,
    malformed_positions,
    produce,
)
from tests.oracles import assert_matches_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import write_quarantine_marker
from tidemark.recovery.audit import audit_sink

pytestmark = pytest.mark.integration


def kafka_source(broker: KafkaBroker, topic: str, **extra: Any) -> dict[str, Any]:
    return helpers.kafka_source(broker.bootstrap, topic, **extra)


def _config(tmp_path: Path, broker: KafkaBroker, topic: str, **source: Any) -> Path:
    # Every offsets/<n> kept: the oracle reads each batch's range from the log.
    return write_config(
        tmp_path, source=kafka_source(broker, topic, **source), checkpoint={"min_batches_to_retain": 1000}
    )


def _after(produced: list[Produced]) -> Any:
    from datetime import datetime, timedelta

    from tidemark.compat import UTC

    newest = max(p.event.timestamp_ms for p in produced)
    return datetime.fromtimestamp(newest / 1000, tz=UTC) + timedelta(minutes=1)


@pytest.mark.slow
def test_corrupt_then_lost_checkpoint_recover_exactly(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "recover-lost"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(240, seed=11, malformed_fraction=0.03))
    config = _config(tmp_path, kafka_broker, topic, max_offsets_per_trigger=80)
    assert main(["run", str(config), "--available-now"]) == 0
    checkpoint = tmp_path / "checkpoint"
    # The run itself is exact over the batches it read, so a difference after `recover` is recover's.
    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, checkpoint, topic))

    # Corrupt: the state is gone, the offsets log survives and tells where the open windows' events start.
    shutil.rmtree(checkpoint / "state")
    capsys.readouterr()
    assert main(["recover", str(config), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert "surviving offsets log" in plan["replay"], plan["replay"]
    assert main(["recover", str(config), "--apply"]) == 0
    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))

    produced += produce(kafka_broker, topic, make_events(120, seed=12, start=_after(produced), first_id=1000))
    assert main(["run", str(config), "--available-now"]) == 0

    # Lost: no offsets log; Kafka's offsets-for-times finds each partition's start.
    shutil.rmtree(checkpoint)
    capsys.readouterr()
    assert main(["recover", str(config), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert "offsets-for-times" in plan["replay"], plan["replay"]
    starts = json.loads(plan["source_offsets"])[topic]
    assert sorted(starts) == ["0", "1", "2", "3"] and all(offset > 0 for offset in starts.values())
    assert main(["recover", str(config), "--apply"]) == 0

    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations


def test_rollback_to_a_batch_then_rerun_is_exact(spark: Any, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    topic = "recover-rollback"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(200, seed=13, late_fraction=0.05, malformed_fraction=0.03))
    config = _config(tmp_path, kafka_broker, topic, max_offsets_per_trigger=50)
    assert main(["run", str(config), "--available-now"]) == 0
    commits = tmp_path / "checkpoint" / "commits"
    assert len([p for p in commits.iterdir() if p.name.isdigit()]) >= 4

    assert main(["recover", str(config), "--to-batch", "1", "--apply"]) == 0
    assert not (commits / "2").exists()
    assert main(["run", str(config), "--available-now"]) == 0

    assert (commits / "2").exists()
    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, tmp_path / "checkpoint", topic))


def test_offsets_removed_by_retention_stop_the_run_or_are_recorded(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "retention"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(120, seed=21))
    config = _config(tmp_path, kafka_broker, topic)
    assert main(["run", str(config), "--available-now"]) == 0
    committed = kafka_broker.end_offsets(topic)
    produced += produce(kafka_broker, topic, make_events(120, seed=22, start=_after(produced), first_id=1000))
    # Retention removes records of partitions 0 and 2 that the next batch needs.
    cut = {0: committed[0] + 7, 2: committed[2] + 3}
    kafka_broker.delete_records(topic, cut)
    expected_ranges = [
        f"{topic}-0 offsets {committed[0]}..{cut[0] - 1}",
        f"{topic}-2 offsets {committed[2]}..{cut[2] - 1}",
    ]

    capsys.readouterr()
    assert main(["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--source", str(config), "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    (expired,) = [f for f in findings if f["code"] == "OFFSETS_EXPIRED"]
    assert all(text in expired["message"] for text in expected_ranges), expired["message"]

    assert main(["run", str(config), "--available-now"]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("tidemark running")]
    assert len(lines) == 1 and "data lost in Kafka" in lines[0] and "fail_on_data_loss = false" in lines[0], lines
    assert all(text in lines[0] for text in expected_ranges), lines[0]

    going_on = _config(tmp_path, kafka_broker, topic, fail_on_data_loss=False)
    assert main(["run", str(going_on), "--available-now"]) == 0
    (loss,) = progress_lines(tmp_path / "checkpoint-monitor", "data-loss")
    assert loss["ranges"] == [
        {"topic": topic, "partition": 0, "first": committed[0], "last": cut[0] - 1},
        {"topic": topic, "partition": 2, "first": committed[2], "last": cut[2] - 1},
    ]
    assert loss["offsets"] == 10
    # Records the first run read stay in its windows; the removed ones were never read.
    kept = [p for p in produced if not committed[p.partition] <= p.offset < cut.get(p.partition, 0)]
    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(kept, tmp_path / "checkpoint", topic))


def _committed_offsets(checkpoint: Path, topic: str) -> tuple[int, dict[int, int]] | None:
    commits = sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")) if checkpoint.exists() else []
    if not commits:
        return None
    text = (checkpoint / "offsets" / str(commits[-1])).read_text().splitlines()[-1]
    return commits[-1], {int(p): o for p, o in json.loads(text)[topic].items()}


@pytest.mark.slow
def test_broker_down_for_30_seconds_mid_run_the_run_waits_and_ends_exact(
    spark: Any, restartable_kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    from tidemark.pipeline.run import run_pipeline

    broker = restartable_kafka_broker
    topic = "outage"
    broker.create_topic(topic, partitions=4)
    produced = produce(broker, topic, make_events(200, seed=31))
    source = kafka_source(broker, topic, max_offsets_per_trigger=40)
    config = load_config(
        write_config(
            tmp_path,
            source=source,
            checkpoint={"min_batches_to_retain": 1000},
            trigger={"mode": "processing-time", "interval": "1 second"},
        )
    )
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = run_pipeline(config, stop=stop)
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="kafka-outage-run")
    thread.start()
    checkpoint = tmp_path / "checkpoint"
    try:
        deadline = time.monotonic() + 300
        while (_committed_offsets(checkpoint, topic) or (-1, {}))[0] < 1:
            assert thread.is_alive(), outcome
            assert time.monotonic() < deadline, "no second commit in time"
            time.sleep(0.2)
        with broker.down():
            time.sleep(30)
        produced += produce(broker, topic, make_events(100, seed=32, start=_after(produced), first_id=1000))
        ends = broker.end_offsets(topic)
        reached: int | None = None
        while True:
            assert thread.is_alive(), outcome
            assert time.monotonic() < deadline + 300, "the run did not catch up after the outage"
            batch, offsets = _committed_offsets(checkpoint, topic) or (-1, {})
            if offsets == ends and reached is None:
                reached = batch
            if reached is not None and batch > reached:  # one more (no-data) batch emitted the final windows
                break
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=300)
    assert "error" not in outcome, outcome
    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, checkpoint, topic))


def test_a_restart_onto_an_uncommitted_batch_reruns_it_exactly(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Spark 4.1's Kafka source fails the progress report of the batch a restart re-runs (after it committed);
    # tidemark starts the query again, and the result is exact.
    topic = "rerun"
    kafka_broker.create_topic(topic, partitions=4)
    events = make_events(160, seed=41, late_fraction=0.05, malformed_fraction=0.1)
    produced = produce(kafka_broker, topic, events)
    config = _config(tmp_path, kafka_broker, topic, max_offsets_per_trigger=50)
    assert main(["run", str(config), "--available-now"]) == 0
    # A crash after the last data batch was planned and its sink files logged, before its commit (so before its
    # malformed records were written: that comes after the commit).
    last = stop_before_the_no_data_batch(tmp_path / "checkpoint", tmp_path / "output", committed=False) - 1
    quarantine = tmp_path / "quarantine"
    (quarantine / f"batch-{last:012d}.jsonl").unlink()  # it held some of the malformed records
    write_quarantine_marker(str(quarantine), last - 1)
    # No new data: after the re-run batch (whose progress report fails) only the owed no-data batch runs.
    assert main(["run", str(config), "--available-now"]) == 0

    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, tmp_path / "checkpoint", topic))
    # Every malformed record quarantined once by this run, the re-run batch's too (its progress report failed).
    quarantined = [
        json.loads(line)["source"] for f in quarantine.glob("batch-*.jsonl") for line in f.read_text().splitlines()
    ]
    assert sorted(quarantined) == sorted(malformed_positions(produced, topic))
    warnings = progress_lines(tmp_path / "checkpoint-monitor", "warning")
    from tidemark.spark.lines import Defect, has_defect

    if has_defect(Defect.KAFKA_METRICS_AFTER_RESTART):
        assert [w for w in warnings if w.get("code") == "SPARK_DEFECT"], warnings
        assert "SPARK_DEFECT: " in capsys.readouterr().err  # the user sees why the query started twice


@pytest.mark.parametrize("committed", [True, False], ids=["killed-after-commit", "killed-before-commit"])
def test_a_restart_with_no_new_data_runs_the_no_data_batch_the_stopped_query_owed(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, committed: bool
) -> None:
    # A query stopped after its last data batch moved the watermark and before the no-data batch that writes the
    # windows it closes; the restart has no new data. Spark alone leaves those windows unwritten (a restarted query
    # has no previous plan to ask, and a re-run its sink skips commits a stale watermark); CI saw it (chaos seed
    # 258135826). The restart must end with every window the watermark closed.
    topic = "owed-" + ("committed" if committed else "uncommitted")
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(160, seed=43, late_fraction=0.05))
    config = _config(tmp_path, kafka_broker, topic, max_offsets_per_trigger=50)
    assert main(["run", str(config), "--available-now"]) == 0
    checkpoint = tmp_path / "checkpoint"
    no_data = stop_before_the_no_data_batch(checkpoint, tmp_path / "output", committed)

    assert main(["run", str(config), "--available-now"]) == 0

    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, checkpoint, topic))
    owed = progress_lines(tmp_path / "checkpoint-monitor", "owed-batch")
    assert [(o["after"], o["batch"]) for o in owed] == [(no_data - 1, no_data)], owed
    # Killed before its commit, the last data batch is re-run, but its sink had logged it: Spark skips its plan and
    # commits the watermark it started with; the owed batch's watermark is read again from the batch's input.
    assert owed[0]["recomputed"] is (not committed), owed
