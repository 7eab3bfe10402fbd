"""The one route to a Spark session: a command started in a fresh process gets the config's jars, credentials and
settings, whichever command it is (issue 37: `check` of a Kafka checkpoint failed on the missing connector while
`run` worked). The shared test session already has the connector, so only a new process shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.integration.test_kafka_pipeline import kafka_source
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import make_events, produce
from tidemark.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TIDEMARK = str(Path(sys.executable).with_name("tidemark"))


def test_check_of_a_kafka_checkpoint_in_a_new_process_gets_the_connector(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    kafka_broker.create_topic("route", partitions=2)
    produce(kafka_broker, "route", make_events(60, seed=5))
    config = write_config(tmp_path, source=kafka_source(kafka_broker, "route"))
    assert main(["run", str(config), "--available-now"]) == 0
    committed = sorted(int(p.name) for p in (tmp_path / "checkpoint" / "commits").iterdir() if p.name.isdigit())

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [TIDEMARK, "check", str(config), "--json"], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["compatible"] is True, report
    assert report["batch"] == committed[-1]
    assert "classpath" not in done.stderr
