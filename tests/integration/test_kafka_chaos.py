"""A Kafka pipeline's driver SIGKILLed 8 times at random moments while a producer keeps writing, then run to the end:
the sink equals the oracle (batch ranges from the offset log), no (key, window) twice in the raw Parquet, every
malformed record quarantined exactly once, the sink ledger clean.

The kill moments: while the JVM starts and the run checks the broker, right after a batch is planned, once a
batch's sink files are on disk before its commit, right after a commit. The seed is printed; set
TIDEMARK_CHAOS_SEED to replay a failure.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import read_sink, write_config
from tests.integration.test_chaos import PHASES, _seed, _wait_for, run_until_killed
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import START, Produced, kafka_oracle, make_events, malformed_positions, produce
from tests.oracles import assert_matches_oracle
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.recovery.audit import audit_sink

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 8
TOPIC = "chaos"
# The producer's pace: a delivery of 25 events every few seconds, for as long as the kills take (bounded: 10 min).
DELIVERY_EVENTS = 25
DELIVERY_EVERY_S = 4.0
MAX_DELIVERIES = 150


class Producer(threading.Thread):
    """Keeps producing small deliveries of events (later and later event times) until stopped (or MAX_DELIVERIES)."""

    def __init__(self, broker: KafkaBroker, seed: int) -> None:
        super().__init__(name="kafka-chaos-producer", daemon=True)
        self.broker = broker
        self.seed = seed
        self.produced: list[Produced] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from datetime import timedelta

        delivery = 0
        try:
            while not self.stop.is_set() and delivery < MAX_DELIVERIES:
                start = START + timedelta(minutes=20) * delivery
                events = make_events(
                    DELIVERY_EVENTS,
                    seed=self.seed + delivery,
                    start=start,
                    span=timedelta(minutes=20),
                    late_fraction=0.04,
                    malformed_fraction=0.04,
                    first_id=1000 * delivery,
                )
                self.produced += produce(self.broker, TOPIC, events)
                delivery += 1
                self.stop.wait(DELIVERY_EVERY_S)
        except BaseException as exc:  # reported by the test
            self.error = exc


# Eight driver starts (a JVM each) took 60-90 s apiece on the polyglot machine: past the suite's 600 s default.
@pytest.mark.timeout(1500)
def test_eight_driver_kills_while_producing_then_run_to_the_end(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    seed = _seed()
    rng = random.Random(seed)
    kafka_broker.create_topic(TOPIC, partitions=4)
    source = {
        "format": "kafka",
        "path": None,
        "max_files_per_trigger": None,
        "bootstrap_servers": kafka_broker.bootstrap,
        "topic": TOPIC,
        "max_offsets_per_trigger": 60,
    }
    config = write_config(
        tmp_path,
        source=source,
        checkpoint={"min_batches_to_retain": 1000},
        trigger={"mode": "processing-time", "interval": "1 second"},
    )
    producer = Producer(kafka_broker, rng.randrange(10_000))
    producer.start()
    plan = [rng.choice(PHASES) for _ in range(KILLS)]
    print(f"kill phases: {plan}")
    try:
        for number, phase in enumerate(plan):
            log = tmp_path / f"driver-{number}.log"
            code = run_until_killed(
                ["run", str(config)],
                partial(_wait_for, phase, tmp_path, rng),
                log,
            )
            ended = log.read_text(errors="replace")[-2000:]
            assert code == -signal.SIGKILL, f"driver {number} ended on its own: {ended}"
    finally:
        producer.stop.set()
        producer.join(timeout=60)
    assert producer.error is None, producer.error
    produced = producer.produced
    assert len(produced) > 100

    # The run to the end reads what is left in one batch (the limit is not part of the checkpoint).
    source["max_offsets_per_trigger"] = None
    config = write_config(tmp_path, source=source, checkpoint={"min_batches_to_retain": 1000})
    assert main(["run", str(config), "--available-now"]) == 0

    checkpoint = tmp_path / "checkpoint"
    assert_matches_oracle(read_sink(tmp_path / "output"), kafka_oracle(produced, checkpoint, TOPIC))
    last = sorted(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))[-1]
    ends = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[-1])[TOPIC]
    assert {int(p): o for p, o in ends.items()} == kafka_broker.end_offsets(TOPIC)  # everything was read
    quarantined = [
        json.loads(line)["source"]
        for f in sorted((tmp_path / "quarantine").glob("batch-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert sorted(quarantined) == sorted(malformed_positions(produced, TOPIC)), "quarantine not exactly once"
    audit = audit_sink(load_config(config))
    assert audit.ok, audit.violations
