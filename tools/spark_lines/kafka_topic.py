"""A Kafka topic for the corpus recorder's real-time mode case (run with the project's venv, not a line's).

    .venv/bin/python tools/spark_lines/kafka_topic.py FOLDER

Starts the tests' single-node broker (tests/kafka_broker.py: Apache Kafka's pinned jars, `make kafka`) under FOLDER,
creates the topic `events` (2 partitions), writes the bootstrap address to FOLDER/bootstrap, then serves requests
the recorder leaves as files: FOLDER/produce-<n>.jsonl is produced (one record per line, keyed by its `k`) and
renamed to .done; FOLDER/stop stops the broker by its pid.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.kafka_broker import Record, start_broker  # noqa: E402

TOPIC = "events"


def main() -> None:
    folder = Path(sys.argv[1])
    broker = start_broker(folder / "broker")
    try:
        broker.create_topic(TOPIC, partitions=2)
        (folder / "bootstrap").write_text(broker.bootstrap)
        while not (folder / "stop").exists():
            for request in sorted(folder.glob("produce-*.jsonl")):
                lines = request.read_text().splitlines()
                broker.produce(TOPIC, [Record(value=line, key=json.loads(line)["k"]) for line in lines])
                request.rename(request.with_suffix(".done"))
            time.sleep(0.2)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
