"""`make kafka-demo` (tools/kafka/demo.py), as docs/kafka.md tells a newcomer to try Kafka: the broker starts, the
demo events flow, both printed commands run as printed and read every record of the topic, and Ctrl-C stops the
broker by its pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.helpers import read_sink
from tidemark.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DEMO = Path(__file__).resolve().parents[2] / "tools" / "kafka" / "demo.py"


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-test"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def _read_through(checkpoint: Path, topic: str) -> dict[int, int]:
    """The offsets the newest batch of a checkpoint read up to (its offset log)."""
    newest = max((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    offsets = json.loads(newest.read_text().splitlines()[-1])
    return {int(p): o for p, o in offsets[topic].items()}


def test_the_kafka_demo_runs_as_the_docs_say(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "demo-kafka"
    demo = subprocess.Popen(
        [sys.executable, str(DEMO), str(folder), "--events", "400", "--per-second", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        while not lines or not lines[-1].startswith("Ctrl-C here"):
            assert time.monotonic() < deadline and demo.poll() is None, lines
            lines.append(demo.stdout.readline().strip())
        broker_pid = int(lines[0].rsplit("pid ", 1)[1])
        bootstrap = lines[0].split()[2]
        commands = [line.split(": ", 1)[1] for line in lines if "run " in line]
        assert len(commands) == 2, lines
        ends = _end_offsets(bootstrap, "clicks")
        assert sum(ends.values()) >= 400

        # As printed: `<tidemark> run <kafka.toml>`, and the event hub's with the connection string's variable.
        kafka_config = commands[0].split(" run ", 1)[1]
        assert main(["run", kafka_config, "--available-now"]) == 0
        assert _read_through(folder / "kafka-checkpoint", "clicks") == ends
        rows = read_sink(folder / "kafka-output")
        assert len(rows) > 0 and rows["count"].sum() > 0

        variable, rest = commands[1].split("=", 1)
        monkeypatch.setenv(variable.strip(), (folder / "connection-string").read_text())
        assert main(["run", rest.split(" run ", 1)[1], "--available-now"]) == 0
        assert _read_through(folder / "eventhubs-checkpoint", "clicks") == ends
        assert read_sink(folder / "eventhubs-output").equals(rows)  # the same topic, the same windows
        capsys.readouterr()
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
    assert demo.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(broker_pid, 0)  # the broker stopped with the demo
