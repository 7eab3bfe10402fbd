"""`format = "eventhubs"` against the test broker's SASL_PLAINTEXT listener, set up as Event Hubs' Kafka endpoint
(user `$ConnectionString`, the namespace's connection string as password): the whole path runs except TLS.

The connection string comes from an environment variable; afterwards every output of the run (stdout, stderr,
each file the run wrote, the analysis and report of its progress log, `checkpoint inspect --json`) is searched for
it and for its key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import read_sink, write_config
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import final_windows_oracle, make_events, malformed_positions, produce
from tests.oracles import assert_matches_oracle
from tidemark.cli.main import main

pytestmark = pytest.mark.integration

HUB = "hub-clicks"
VARIABLE = "TM_TEST_EVENTHUBS_CONNECTION"


def event_hubs_source(broker: KafkaBroker, hub: str, **extra: Any) -> dict[str, Any]:
    """[source] for an event hub of the broker's Event Hubs-style SASL listener (emulator override)."""
    namespace = re.search(r"sb://([^.]+)\.", broker.connection_string)
    assert namespace is not None
    return {
        "format": "eventhubs",
        "path": None,
        "max_files_per_trigger": None,
        "namespace": namespace.group(1),
        "event_hub": hub,
        "connection_string_env": VARIABLE,
        "bootstrap_servers": broker.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        **extra,
    }


def _secrets(broker: KafkaBroker) -> list[str]:
    key = broker.connection_string.split("SharedAccessKey=", 1)[1]
    return [broker.connection_string, key, key[:20]]


def _files_holding(root: Path, secrets: list[str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if any(secret.encode() in data for secret in secrets):
                found.append(str(path))
    return found


def test_event_hubs_runs_and_no_output_holds_the_connection_string(
    spark: Any,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka_broker.create_topic(HUB, partitions=4)
    produced = produce(kafka_broker, HUB, make_events(200, seed=7, malformed_fraction=0.05))
    monkeypatch.setenv(VARIABLE, kafka_broker.connection_string)
    config = write_config(tmp_path, source=event_hubs_source(kafka_broker, HUB, max_offsets_per_trigger=90))

    assert main(["--debug", "run", str(config), "--available-now"]) == 0

    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))
    quarantined = (tmp_path / "quarantine").glob("batch-*.jsonl")
    sources = sorted(
        line.split('"source": "')[1].split('"')[0] for f in quarantined for line in f.read_text().splitlines()
    )
    assert sources == sorted(malformed_positions(produced, HUB))
    logs = sorted((tmp_path / "checkpoint-monitor").glob("*.jsonl"))
    assert logs
    # Lag per partition in the progress log, from each batch's endOffset and latestOffset: it falls to 0.
    lines = [json.loads(line) for line in logs[-1].read_text().splitlines()]
    lags = [line["source_lag"] for line in lines if line["type"] == "progress"]
    assert lags and all(set(lag) == {f"{HUB}-{p}" for p in range(4)} for lag in lags)
    assert sum(lags[0].values()) > 0 and sum(lags[-1].values()) == 0
    assert main(["analyze", str(logs[-1]), "--json"]) == 0
    assert main(["report", str(logs[-1]), "-o", str(tmp_path / "report.html")]) == 0
    assert main(["checkpoint", "inspect", str(tmp_path / "checkpoint"), "--json"]) == 0
    captured = capfd.readouterr()
    secrets = _secrets(kafka_broker)
    for text in (captured.out, captured.err):
        assert not [s for s in secrets if s in text]
    assert _files_holding(tmp_path, secrets) == []
    # Spark's own record of every SQL execution (the SQL tab, the event log): the JAAS line is redacted there too.
    recorded = _recorded_executions(spark)
    assert "runId = " in recorded  # the run's micro-batch executions are in the record...
    assert not [s for s in secrets if s in recorded]  # ...without the connection string


def _recorded_executions(spark: Any) -> str:
    """What Spark's status store holds of each SQL execution: description, details, plan and settings."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    parts = []
    for index in range(executions.size()):
        execution = executions.apply(index)
        parts += [execution.description(), execution.details(), execution.physicalPlanDescription()]
        parts.append(str(execution.modifiedConfigs()))
    return "\n".join(str(part) for part in parts)


def test_a_wrong_connection_string_fails_authentication_naming_the_user_not_the_secret(
    spark: Any,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka_broker.create_topic("hub-auth", partitions=1)
    wrong = kafka_broker.connection_string.replace("SharedAccessKey=", "SharedAccessKey=Wr0ng")
    monkeypatch.setenv(VARIABLE, wrong)
    config = write_config(tmp_path, source=event_hubs_source(kafka_broker, "hub-auth"))

    assert main(["run", str(config), "--available-now"]) == 1

    captured = capfd.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip() and not ln.startswith("tidemark running")]
    assert len(lines) == 1, lines
    assert "authentication failed" in lines[0] and "$ConnectionString" in lines[0], lines[0]
    assert f"environment variable {VARIABLE}" in lines[0]
    for text in (captured.out, captured.err):
        assert wrong not in text and "Wr0ng" not in text and kafka_broker.connection_string not in text
    assert _files_holding(tmp_path, [wrong, "Wr0ng"]) == []


def test_a_missing_connection_string_variable_is_named(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kafka_broker: KafkaBroker
) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    config = write_config(tmp_path, source=event_hubs_source(kafka_broker, "hub-any"))
    assert main(["run", str(config), "--available-now"]) == 1
    captured = capfd.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip() and not ln.startswith("tidemark running")]
    assert len(lines) == 1 and f"{VARIABLE} is not set" in lines[0], lines
    assert "Traceback" not in captured.err
