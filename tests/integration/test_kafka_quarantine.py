"""A Kafka batch's malformed records: carried by the stream's own observation, or read again past its bound.

Both ways must write exactly the malformed records produced, once each, with the value as the broker holds it; the
progress log never carries the records (only their count).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import QUARANTINE_TIME, write_config
from tests.integration.test_kafka_pipeline import kafka_source
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import make_events, malformed_positions, produce
from tidemark.cli.main import main
from tidemark.pipeline import quarantine
from tidemark.spark.jvm import carries_records

pytestmark = pytest.mark.integration

CARRIED = "from the stream's own observation"


@pytest.mark.parametrize("bound", ["default", "below one record"])
def test_malformed_kafka_records_are_written_once_each_either_way(
    spark: Any,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    bound: str,
) -> None:
    topic = f"malformed-{bound.replace(' ', '-')}"
    kafka_broker.create_topic(topic, partitions=4)
    produced = produce(kafka_broker, topic, make_events(200, seed=5, malformed_fraction=0.12))
    if bound != "default":
        monkeypatch.setattr(quarantine, "INLINE_CHARS", 20)  # every malformed record is longer
    config = write_config(tmp_path, source=kafka_source(kafka_broker, topic, max_offsets_per_trigger=60))

    with caplog.at_level(logging.DEBUG, logger="tidemark.pipeline.reconcile"):
        assert main(["run", str(config), "--available-now"]) == 0

    quarantined = [
        json.loads(line) for f in sorted((tmp_path / "quarantine").glob("batch-*.jsonl")) for line in f.open()
    ]
    expected = malformed_positions(produced, topic)
    assert len(expected) >= 10
    assert sorted(q["source"] for q in quarantined) == sorted(expected)  # each once, none missing
    values = {f"{topic}/{p.partition}/{p.offset}": p.event.value for p in produced}
    unparseable = [q for q in quarantined if q["reason"] == quarantine.REASON_UNPARSEABLE]
    mismatched = [q for q in unparseable if values[q["source"]] is not None and q["raw"] != values[q["source"]]]
    assert unparseable and not mismatched  # the value as produced (a null value: an empty raw)
    reasons = {quarantine.REASON_UNPARSEABLE, quarantine.REASON_KEY, quarantine.REASON_EVENT_TIME}
    assert {q["reason"] for q in quarantined} <= reasons
    # The same time stamp form as a file source's records (tests/integration/test_pipeline.py), whichever writer.
    assert all(QUARANTINE_TIME.fullmatch(q["quarantined_at"]) for q in quarantined), quarantined[0]

    progress = [
        json.loads(line)["progress"]
        for log in (tmp_path / "checkpoint-monitor").glob("*.jsonl")
        for line in log.open()
        if json.loads(line)["type"] == "progress"
    ]
    observed = [p["observedMetrics"][quarantine.OBSERVATION] for p in progress if p.get("observedMetrics")]
    with_malformed = {
        p["batchId"] for p in progress if (p.get("observedMetrics") or {}).get(quarantine.OBSERVATION, {}).get("count")
    }
    assert len(with_malformed) >= 3 and all(quarantine.RECORDS not in o for o in observed)
    carried = {int(r.getMessage().split()[1].rstrip(":")) for r in caplog.records if CARRIED in r.getMessage()}
    # Spark 3.5 cannot run the aggregate in an observation (spark/lines.py): there every batch is read again.
    assert carried == (with_malformed if bound == "default" and carries_records() else set())
