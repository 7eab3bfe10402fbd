"""Issue 15.3: the Kafka code paths that need no broker: replay options for every recovery case, the
offset range a quarantine re-read of one micro-batch gets, and Event Hubs' Kafka endpoint options."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.compat import UTC
from tidemark.config import TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.formats import Checkpoint
from tidemark.formats.kafka_offsets import TopicPartition
from tidemark.recovery.plan import plan_recovery
from tidemark.recovery.replay import EPOCH, describe_replay, replay_config
from tidemark.sources import source_of
from tidemark.sources.kafka import frames
from tidemark.sources.kafka.frames import kafka_options
from tidemark.sources.kafka.replay import from_offsets_log

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="$ConnectionString" password="SECRET";'
)
EVENT_HUBS = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "PLAIN",
    "kafka.request.timeout.ms": "60000",
}


@pytest.fixture(autouse=True)
def _jaas_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TM_TEST_JAAS", JAAS)


def _config(tmp_path: Path, options: dict[str, str] | None = None, **source_keys: Any) -> TidemarkConfig:
    source = {
        "format": "kafka",
        "path": None,
        "bootstrap_servers": "ns.servicebus.windows.net:9093",
        "topic": "events",
        "max_files_per_trigger": None,
        "options": {f'"{k}"': v for k, v in {**EVENT_HUBS, **(options or {})}.items()},
        "options_from_env": {'"kafka.sasl.jaas.config"': "TM_TEST_JAAS"},
        **source_keys,
    }
    return load_config(write_config(tmp_path, source=source, checkpoint={"max_lookback": "1 day"}))


def test_replay_starts_at_the_plans_offsets_or_the_earliest(tmp_path: Path) -> None:
    config = _config(tmp_path, {"startingOffsetsByTimestamp": '{"events": {"0": 1}}'}, starting_offsets="latest")
    offsets = '{"events":{"0":120,"1":98}}'
    options = kafka_options(replay_config(PipelineContext.of(config), datetime(2026, 3, 1, tzinfo=UTC), offsets))
    assert options["startingOffsets"] == offsets
    assert "startingOffsetsByTimestamp" not in options and "startingTimestamp" not in options  # they would win
    for key, value in EVENT_HUBS.items():  # the endpoint settings reach Spark unchanged
        assert options[key] == value
    timed = _config(tmp_path, starting_offsets="2026-01-01T00:00:00Z")
    options = kafka_options(replay_config(PipelineContext.of(timed), EPOCH))
    assert options["startingOffsets"] == "earliest" and "startingTimestamp" not in options


def test_recovery_plan_with_no_finalized_window_names_no_secret(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "output").mkdir()
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=None, now=datetime(2026, 3, 1, tzinfo=UTC))
    assert plan.resume_from == EPOCH
    assert "per-partition start offsets" in describe_replay(PipelineContext.of(config), EPOCH)
    assert "SECRET" not in plan.replay and "SECRET" not in json.dumps(plan.to_json())


def test_the_offsets_log_gives_the_first_batch_that_can_hold_an_event_at_the_resume_point(tmp_path: Path) -> None:
    # Watermark delay 10 minutes: batch b ran with watermark = newest event before b - 10 min.
    root = tmp_path / "checkpoint"
    minute = 60_000
    base = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    watermarks = [0, base + 20 * minute, base + 50 * minute, base + 80 * minute]  # newest before: +30, +60, +90
    for batch, watermark in enumerate(watermarks):
        meta = {"batchWatermarkMs": watermark, "batchTimestampMs": 0, "conf": {}}
        offsets = {"events": {"0": 10 * (batch + 1), "1": 5 * (batch + 1)}}
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"events":{"0":0,"1":0}}')
    checkpoint = Checkpoint.open(str(root))
    delay = 10 * minute
    at = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)  # +60: batch 0 saw events up to +30, batches 0..1 up to +60
    t0, t1 = TopicPartition("events", 0), TopicPartition("events", 1)
    assert from_offsets_log(checkpoint, at, delay) == ({t0: 10, t1: 5}, 1)  # batch 1 may hold an event at +60
    assert from_offsets_log(checkpoint, at + timedelta(minutes=1), delay) == ({t0: 20, t1: 10}, 2)
    assert from_offsets_log(checkpoint, datetime(2026, 1, 1, 0, 20, tzinfo=UTC), delay) == ({t0: 0, t1: 0}, 0)
    (root / "offsets" / "0").unlink()  # pruned: a resume point before batch 1's data cannot be placed
    assert from_offsets_log(checkpoint, datetime(2026, 1, 1, 0, 20, tzinfo=UTC), delay) is None


def _kafka_checkpoint(root: Path) -> Checkpoint:
    offsets = [{"events": {"0": 10, "1": 7}}, {"events": {"0": 25, "1": 9}}]
    for batch, offset in enumerate(offsets):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        text = f"v1\n{json.dumps(meta)}\n{json.dumps(offset)}"
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(batch)).write_text(text)
        (root / "commits").mkdir(exist_ok=True)
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"events":{"0":3,"1":0}}')  # KafkaSource's own format
    return Checkpoint.open(str(root))


def test_quarantine_rereads_exactly_the_offset_range_of_each_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, max_offsets_per_trigger=1000, starting_offsets="2026-01-01T00:00:00Z")
    checkpoint = _kafka_checkpoint(tmp_path / "checkpoint")
    source = source_of(config)
    inputs = source.committed_inputs(checkpoint, [0, 1])
    assert (inputs[0].start, inputs[0].end) == (
        json.dumps({"events": {"0": 3, "1": 0}}),
        json.dumps({"events": {"0": 10, "1": 7}}),
    )
    assert inputs[0].names == (json.dumps({"events": {"0": 10, "1": 7}}),)  # what audit shows: where it read to
    start, end = inputs[1].start, inputs[1].end or ""
    assert json.loads(start or "") == {"events": {"0": 10, "1": 7}} and json.loads(end) == {"events": {"0": 25, "1": 9}}
    options = kafka_options(config, start, end)
    assert options["startingOffsets"] == start and options["endingOffsets"] == end
    assert "maxOffsetsPerTrigger" not in options and "startingTimestamp" not in options  # batch reads reject them
    assert options["kafka.sasl.jaas.config"] == JAAS
    seen: list[tuple[str | None, str]] = []

    def fake_read(spark: Any, cfg: TidemarkConfig, first: str | None, last: str) -> str:
        seen.append((first, last))
        return "stream"

    monkeypatch.setattr(frames, "read_kafka_range", fake_read)
    assert source.read_input(None, inputs[1]) == "stream"  # type: ignore[arg-type]
    assert seen == [(start, end)]
