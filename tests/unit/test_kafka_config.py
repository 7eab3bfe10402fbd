"""Kafka and Event Hubs [source] tables: what Spark's Kafka source gets, and secrets never taken from the TOML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import TidemarkConfig, load_config
from tidemark.errors import ConfigError, SourceError
from tidemark.secrets import redact
from tidemark.sources.kafka.options import kafka_access

CONNECTION = (
    "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=listen;"
    "SharedAccessKey=c2VjcmV0LWtleS1ub3QtcmVhbC0xMjM0NTY3ODkwYWJjZA=="
)


def _kafka(tmp_path: Path, **source: Any) -> Path:
    base = {"format": "kafka", "path": None, "max_files_per_trigger": None, "bootstrap_servers": "b1:9092,b2:9092"}
    return write_config(tmp_path, source={**base, "topic": "clicks", **source})


def _hubs(tmp_path: Path, **source: Any) -> Path:
    base = {
        "format": "eventhubs",
        "path": None,
        "max_files_per_trigger": None,
        "namespace": "contoso",
        "event_hub": "clicks",
        "connection_string_env": "TM_TEST_EVENTHUBS",
    }
    return write_config(tmp_path, source={**base, **source})


def _options(config: TidemarkConfig) -> dict[str, str]:
    return kafka_access(config).spark_options()


def test_kafka_keys_become_spark_options(tmp_path: Path) -> None:
    config = load_config(
        _kafka(
            tmp_path,
            max_offsets_per_trigger=500,
            min_partitions=8,
            options={"includeHeaders": True, '"kafka.fetch.max.bytes"': 1048576},
        )
    )
    assert _options(config) == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "kafka.fetch.max.bytes": "1048576",
        "subscribe": "clicks",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "500",
        "minPartitions": "8",
        "failOnDataLoss": "true",
        "includeHeaders": "true",
    }


def test_topic_pattern_and_fail_on_data_loss(tmp_path: Path) -> None:
    config = load_config(_kafka(tmp_path, topic=None, topic_pattern="clicks-.*", fail_on_data_loss=False))
    options = _options(config)
    assert options["subscribePattern"] == "clicks-.*" and "subscribe" not in options
    assert options["failOnDataLoss"] == "false"
    assert config.source.subscription == "topics matching 'clicks-.*'"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("latest", {"startingOffsets": "latest"}),
        ("EARLIEST", {"startingOffsets": "earliest"}),
        (
            "2026-01-01T00:00:00Z",
            {"startingTimestamp": "1767225600000", "startingOffsetsByTimestampStrategy": "latest"},
        ),
        ('{"clicks": {"0": 42, "1": -2}}', {"startingOffsets": '{"clicks":{"0":42,"1":-2}}'}),
        ({"clicks": {'"0"': 7, '"3"': -1}}, {"startingOffsets": '{"clicks":{"0":7,"3":-1}}'}),
    ],
)
def test_starting_positions(tmp_path: Path, given: Any, expected: dict[str, str]) -> None:
    options = _options(load_config(_kafka(tmp_path, starting_offsets=given)))
    assert {k: v for k, v in options.items() if k.startswith("starting")} == expected


@pytest.mark.parametrize("given", ["yesterday", "2026-01-01T00:00:00", '{"clicks": {"x": 1}}', '{"clicks": 1}', "{"])
def test_bad_starting_positions_name_the_accepted_forms(tmp_path: Path, given: str) -> None:
    with pytest.raises(ConfigError, match="starting_offsets"):
        load_config(_kafka(tmp_path, starting_offsets=given))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("kafka.sasl.jaas.config", 'org.apache...PlainLoginModule required username="u" password="hunter2-secret";'),
        ("kafka.ssl.truststore.password", "hunter2-secret"),
        ("kafka.sasl.oauthbearer.client.credentials.client.secret", "hunter2-secret"),
        ("kafka.client.rack", CONNECTION),  # a connection string under any name
    ],
)
def test_a_secret_in_options_is_refused_in_one_line_without_its_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    path = _kafka(tmp_path, options={f'"{name}"': value})
    with pytest.raises(ConfigError, match="holds a secret") as refused:
        load_config(path)
    assert "options_from_env" in str(refused.value) and name in str(refused.value)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    # --debug shows the whole trace, never the refused value (pydantic's own error text quotes its input).
    assert main(["--debug", "run", str(path)]) == 2
    traced = capsys.readouterr().err
    assert "Traceback" in traced
    for text in (str(refused.value), err, traced):
        assert "hunter2" not in text and "SharedAccessKey=" not in text


@pytest.mark.parametrize(
    ("name", "hint"),
    [("subscribe", "topic"), ("startingOffsets", "starting_offsets"), ("maxOffsetsPerTrigger", "max_offsets")],
)
def test_options_with_their_own_key_are_refused(tmp_path: Path, name: str, hint: str) -> None:
    with pytest.raises(ConfigError, match=hint):
        load_config(_kafka(tmp_path, options={name: "x"}))


def test_secret_options_come_from_the_environment_or_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="reader" password="s3cr3t-pw";'
    monkeypatch.setenv("TM_TEST_JAAS", jaas)
    (tmp_path / "truststore-password").write_text("trust-me-123\n")
    config = load_config(
        _kafka(
            tmp_path,
            options={'"kafka.security.protocol"': "SASL_SSL", '"kafka.sasl.mechanism"': "SCRAM-SHA-512"},
            options_from_env={'"kafka.sasl.jaas.config"': "TM_TEST_JAAS"},
            options_from_file={'"kafka.ssl.truststore.password"': str(tmp_path / "truststore-password")},
        )
    )
    access = kafka_access(config)
    options = access.spark_options()
    assert options["kafka.sasl.jaas.config"] == jaas
    assert options["kafka.ssl.truststore.password"] == "trust-me-123"
    assert access.endpoint.user == "reader" and access.endpoint.security_protocol == "SASL_SSL"
    assert "s3cr3t" not in repr(access) and "s3cr3t" not in repr(config)
    assert redact(f"failed: {jaas}") == "failed: ***"
    monkeypatch.delenv("TM_TEST_JAAS")
    with pytest.raises(SourceError, match="TM_TEST_JAAS is not set"):
        kafka_access(config)


def test_event_hubs_maps_to_its_kafka_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TM_TEST_EVENTHUBS", CONNECTION)
    config = load_config(_hubs(tmp_path, options={'"kafka.request.timeout.ms"': 90000}))
    options = _options(config)
    assert options["kafka.bootstrap.servers"] == "contoso.servicebus.windows.net:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="$ConnectionString" password="{CONNECTION}";'
    )
    assert options["subscribe"] == "clicks"
    # Microsoft's recommended timeouts, the user's own value winning.
    assert options["kafka.request.timeout.ms"] == "90000"
    assert options["kafka.session.timeout.ms"] == "30000"
    assert options["kafka.metadata.max.age.ms"] == "180000"
    assert options["kafka.connections.max.idle.ms"] == "180000"
    assert kafka_access(config).endpoint.describe() == (
        "contoso.servicebus.windows.net:9093 (SASL_SSL, user $ConnectionString)"
    )
    assert CONNECTION not in json.dumps(config.model_dump(mode="json"))


def test_event_hubs_connection_string_from_a_file_and_an_emulator_endpoint(tmp_path: Path) -> None:
    (tmp_path / "cs").write_text(CONNECTION.replace("contoso.", "other.") + "\n")
    config = load_config(
        _hubs(
            tmp_path,
            connection_string_env=None,
            connection_string_file=str(tmp_path / "cs"),
            bootstrap_servers="127.0.0.1:19093",
            security_protocol="SASL_PLAINTEXT",
        )
    )
    options = _options(config)  # an explicit endpoint: the connection string's namespace is not compared
    assert options["kafka.bootstrap.servers"] == "127.0.0.1:19093"
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"


def test_event_hubs_bad_connection_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(_hubs(tmp_path))
    with pytest.raises(SourceError, match="TM_TEST_EVENTHUBS is not set"):
        kafka_access(config)
    monkeypatch.setenv("TM_TEST_EVENTHUBS", CONNECTION.replace("contoso.", "fabrikam."))
    with pytest.raises(SourceError, match="is for fabrikam") as wrong:
        kafka_access(config)
    assert "SharedAccessKey=" not in str(wrong.value)
    monkeypatch.setenv("TM_TEST_EVENTHUBS", "just-a-password")
    with pytest.raises(SourceError, match="not an Event Hubs connection string"):
        kafka_access(config)
    monkeypatch.setenv("TM_TEST_EVENTHUBS", CONNECTION + ";EntityPath=views")
    with pytest.raises(SourceError, match="event hub 'views'"):
        kafka_access(config)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"namespace": None}, "namespace"),
        ({"connection_string_env": None}, "connection_string_env"),
        ({"connection_string_file": "/x"}, "exactly one of connection_string_env"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "unencrypted"),
        ({"security_protocol": "PLAINTEXT", "bootstrap_servers": "h:1"}, "SASL_SSL"),
        ({"options": {'"kafka.security.protocol"': "SSL"}}, "tidemark sets it"),
        ({"event_hub": None}, "exactly one of event_hub and topic_pattern"),
        ({"topic": "x"}, "topic"),
    ],
)
def test_event_hubs_config_errors(tmp_path: Path, source: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_hubs(tmp_path, **source))


def test_kafka_keys_on_a_file_source_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="applies to formats"):
        load_config(write_config(tmp_path, source={"topic": "clicks"}))
