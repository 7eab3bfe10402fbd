"""Kafka end to end against a real broker: windows equal the oracle, quarantine holds exactly the malformed records.

The data has keys over at least 4 partitions, out-of-order events within the watermark, very late events past it
(dropped, as Spark drops them) and malformed values of five kinds. The oracle takes the batch boundaries from the
checkpoint's offset log and computes the windows itself (tests/kafka_data.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import helpers
from tests.helpers import read_sink, write_config
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import batch_ranges, final_windows_oracle, kafka_oracle, make_events, malformed_positions, produce
from tests.oracles import assert_matches_oracle
from tidemark.cli.main import main

pytestmark = pytest.mark.integration

TOPIC = "clicks"


def kafka_source(broker: KafkaBroker, topic: str | None, **extra: Any) -> dict[str, Any]:
    """[source] overrides for a Kafka topic of the test broker (the JSON events of tests/kafka_data.py)."""
    return helpers.kafka_source(broker.bootstrap, topic, **extra)


def _quarantined(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(folder.glob("batch-*.jsonl")) for line in f.read_text().splitlines()]


@pytest.mark.slow
def test_windows_and_quarantine_equal_the_oracle(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka_broker.create_topic(TOPIC, partitions=4)
    first = produce(kafka_broker, TOPIC, make_events(240, seed=1, late_fraction=0.05, malformed_fraction=0.06))
    assert len({p.partition for p in first}) == 4
    config = write_config(tmp_path, source=kafka_source(kafka_broker, TOPIC, max_offsets_per_trigger=70))

    assert main(["run", str(config), "--available-now"]) == 0
    # A second delivery, with more very late events, read by a second run from the committed offsets.
    more = make_events(120, seed=2, start=_after(first), late_fraction=0.1, malformed_fraction=0.05, first_id=1000)
    second = produce(kafka_broker, TOPIC, more)
    assert main(["run", str(config), "--available-now"]) == 0

    produced = first + second
    expected = kafka_oracle(produced, tmp_path / "checkpoint", TOPIC)
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    # Very late events were dropped as late: with none dropped (one batch) the same final windows count more.
    assert final_windows_oracle(produced)["count"].sum() > expected["count"].sum()
    assert len(batch_ranges(tmp_path / "checkpoint", TOPIC)) >= 6  # several batches per run
    quarantined = _quarantined(tmp_path / "quarantine")
    assert sorted(q["source"] for q in quarantined) == sorted(malformed_positions(produced, TOPIC))
    assert len(quarantined) == len(malformed_positions(produced, TOPIC)) >= 10
    assert {q["reason"] for q in quarantined} >= {"unparseable record", "missing key", "missing or invalid event time"}

    # checkpoint inspect: each partition's committed offset; with --source the broker's end and the lag.
    committed = kafka_broker.end_offsets(TOPIC)
    produce(kafka_broker, TOPIC, make_events(30, seed=3, start=_after(produced), first_id=5000))
    capsys.readouterr()
    assert main(["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["kafka"]
    assert {p["partition"]: p["committed"] for p in plain["partitions"]} == committed
    assert plain["broker"] is None
    assert main(["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--source", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ends = kafka_broker.end_offsets(TOPIC)
    partitions = {p["partition"]: p for p in report["kafka"]["partitions"]}
    assert {p: (v["committed"], v["earliest"], v["end"]) for p, v in partitions.items()} == {
        p: (committed[p], 0, ends[p]) for p in ends
    }
    assert report["kafka"]["total_lag"] == 30 and report["kafka"]["broker"] == kafka_broker.bootstrap
    assert not [f for f in report["findings"] if f["code"] == "OFFSETS_EXPIRED"]


def _after(produced: list[Any]) -> Any:
    from datetime import datetime, timedelta

    from tidemark.compat import UTC

    newest = max(p.event.timestamp_ms for p in produced)
    return datetime.fromtimestamp(newest / 1000, tz=UTC) + timedelta(minutes=1)


def _one_error_line(captured: str) -> str:
    lines = [line for line in captured.splitlines() if line.strip() and not line.startswith("tidemark running")]
    assert len(lines) == 1, lines
    assert "Traceback" not in captured and "\tat " not in captured
    return lines[0]


def test_unreachable_broker_names_the_bootstrap_servers_within_the_timeout(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import time

    config = write_config(tmp_path, source=helpers.kafka_source("127.0.0.1:9", TOPIC, connect_timeout="3 seconds"))
    started = time.monotonic()
    assert main(["run", str(config), "--available-now"]) == 1
    took = time.monotonic() - started
    line = _one_error_line(capfd.readouterr().err)
    assert "127.0.0.1:9" in line and "did not answer within 3 s" in line, line
    assert took < 20, took


def test_unknown_topic_names_it_and_lists_the_topics(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    kafka_broker.create_topic("known-topic", partitions=1)
    config = write_config(tmp_path, source=kafka_source(kafka_broker, "no-such-topic"))
    assert main(["run", str(config), "--available-now"]) == 1
    line = _one_error_line(capfd.readouterr().err)
    assert "'no-such-topic' does not exist" in line and "known-topic" in line, line
    assert not (tmp_path / "checkpoint" / "offsets").exists()
    # Per-partition starting offsets must name every partition of the topic.
    kafka_broker.create_topic("four", partitions=4)
    named = write_config(tmp_path, source=kafka_source(kafka_broker, "four", starting_offsets='{"four": {"0": 0}}'))
    assert main(["run", str(named), "--available-now"]) == 1
    line = _one_error_line(capfd.readouterr().err)
    assert "names 1 partition(s) but the subscription has 4: add four-1, four-2, four-3" in line, line


def test_catch_up_reads_a_kafka_backlog_in_one_large_batch(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    kafka_broker.create_topic("catch-up", partitions=4)
    produced = produce(kafka_broker, "catch-up", make_events(400, seed=9))
    config = write_config(
        tmp_path,
        source=kafka_source(kafka_broker, "catch-up", max_offsets_per_trigger=20),  # 20 batches without catch-up
        trigger={"target_batch_duration": "1 minute"},
    )
    assert main(["run", str(config), "--available-now"]) == 0

    lines = [json.loads(line) for log in (tmp_path / "checkpoint-monitor").glob("*.jsonl") for line in log.open()]
    (plan,) = [line for line in lines if line["type"] == "catch-up"]
    assert plan["active"] and plan["backlog_records"] == 400 and plan["offsets_per_trigger"] == 400
    read = [line["progress"]["numInputRows"] for line in lines if line["type"] == "progress"]
    assert [rows for rows in read if rows] == [400]
    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))


def test_record_fields_are_columns_the_aggregation_and_event_time_use(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Keyed on the record key, event time from the record timestamp, aggregates over partition and offset."""
    import pandas as pd

    topic = "fields"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(160, seed=31))
    config = write_config(
        tmp_path,
        source=kafka_source(kafka_broker, topic),
        event_time={"column": "kafka_timestamp", "watermark": "10 minutes"},
        aggregation={
            "key": ["kafka_key"],
            "extra": [
                {"function": "sum", "column": "value", "name": "value_sum"},
                {"function": "max", "column": "kafka_offset", "name": "last_offset"},
                {"function": "max", "column": "kafka_partition", "name": "partition"},
            ],
        },
    )
    assert main(["run", str(config), "--available-now"]) == 0
    ranges = batch_ranges(tmp_path / "checkpoint", topic)
    assert len([r for r in ranges if any(first < end for first, end in r.values())]) == 1  # one batch read it all

    # The oracle from what the broker stored (key, timestamp, partition, offset), not from the JSON's own fields.
    records = pd.DataFrame(
        {
            "kafka_key": p.event.key,
            "ts": pd.Timestamp(p.event.timestamp_ms, unit="ms", tz="UTC"),
            "value": json.loads(p.event.value or "{}")["value"],
            "partition": p.partition,
            "offset": p.offset,
        }
        for p in produced
    )
    records["windowStart"] = records["ts"].dt.floor("15min")
    watermark = records["ts"].max() - pd.Timedelta(minutes=10)
    expected = (
        records.groupby(["kafka_key", "windowStart"])
        .agg(
            count=("ts", "size"),
            firstEventTime=("ts", "min"),
            lastEventTime=("ts", "max"),
            value_sum=("value", "sum"),
            last_offset=("offset", "max"),
            partition=("partition", "max"),
        )
        .reset_index()
    )
    expected = expected[expected["windowStart"] + pd.Timedelta(minutes=15) <= watermark].reset_index(drop=True)
    actual = pd.read_parquet(tmp_path / "output")
    actual["windowStart"] = pd.to_datetime(actual["windowStart"].astype(str), utc=True)
    for column in ("firstEventTime", "lastEventTime"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    actual = actual.sort_values(["kafka_key", "windowStart"]).reset_index(drop=True)
    assert len(expected) > 20
    assert actual[["kafka_key", "windowStart", "count", "last_offset", "partition"]].astype(str).values.tolist() == (
        expected[["kafka_key", "windowStart", "count", "last_offset", "partition"]].astype(str).values.tolist()
    )
    assert (actual["firstEventTime"] == expected["firstEventTime"]).all()
    assert (actual["lastEventTime"] == expected["lastEventTime"]).all()
    assert (actual["value_sum"] - expected["value_sum"]).abs().max() < 1e-6


def test_a_topic_pattern_read_from_a_timestamp(spark: Any, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    """Two topics matched by a pattern; the run starts at a time between two deliveries (offsets-for-times)."""
    from datetime import timedelta

    from tidemark.compat import UTC

    topics = ("pat-a", "pat-b")
    old: dict[str, list[Any]] = {}
    new: dict[str, list[Any]] = {}
    for n, topic in enumerate(topics):
        kafka_broker.create_topic(topic, partitions=2)
        old[topic] = produce(kafka_broker, topic, make_events(60, seed=40 + n, first_id=100 * n))
    cut = _after(old[topics[0]] + old[topics[1]])  # after every old record's timestamp
    for n, topic in enumerate(topics):
        # Out of order by at most 5 minutes: starting 10 minutes after the cut keeps every new record after it.
        events = make_events(80, seed=50 + n, start=cut + timedelta(minutes=10), first_id=1000 + 100 * n)
        new[topic] = produce(kafka_broker, topic, events)
    source = kafka_source(
        kafka_broker, None, topic_pattern="pat-.*", starting_offsets=cut.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    config = write_config(tmp_path, source=source)
    assert main(["run", str(config), "--available-now"]) == 0

    checkpoint = tmp_path / "checkpoint"
    for topic in topics:
        ranges = batch_ranges(checkpoint, topic)
        starts = {p: first for p, (first, _) in ranges[0].items()}
        assert starts == {p: sum(1 for r in old[topic] if r.partition == p) for p in (0, 1)}, (topic, starts)
        assert {p: end for p, (_, end) in ranges[-1].items()} == kafka_broker.end_offsets(topic)
    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(new[topics[0]] + new[topics[1]]))
