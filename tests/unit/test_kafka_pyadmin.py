"""Kafka's Java client options translated for librdkafka (the Kafka admin of a Spark Connect client)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tidemark.errors import SourceError
from tidemark.sources.kafka.pyadmin import librdkafka_config

TIMEOUT = timedelta(seconds=12)


def test_plaintext_takes_the_servers_and_the_timeout() -> None:
    conf = librdkafka_config({"bootstrap.servers": "a:9092,b:9092", "request.timeout.ms": "5"}, TIMEOUT)
    assert conf["bootstrap.servers"] == "a:9092,b:9092"
    assert conf["socket.timeout.ms"] == "12000"
    assert "request.timeout.ms" not in conf and "security.protocol" not in conf


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "scram-sha-256"])
def test_sasl_user_and_password_come_from_the_jaas_line(mechanism: str) -> None:
    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="$ConnectionString" '
        'password="Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKey=a\\"b";'
    )
    client = {
        "bootstrap.servers": "ns.servicebus.windows.net:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": jaas,
    }
    conf = librdkafka_config(client, TIMEOUT)
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanisms"] == mechanism.upper()
    assert conf["sasl.username"] == "$ConnectionString"
    assert conf["sasl.password"] == 'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKey=a"b'


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"ssl.truststore.location": "/etc/kafka/trust.jks"}, "kafka.ssl.truststore.location is a Java client's"),
        ({"sasl.mechanism": "OAUTHBEARER"}, "SASL mechanism OAUTHBEARER is not available without a JVM"),
        ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": 'x required token="s3cret";'}, "no username and password"),
    ],
)
def test_what_librdkafka_cannot_take_is_one_line_without_secrets(extra: dict[str, str], said: str) -> None:
    with pytest.raises(SourceError) as refused:
        librdkafka_config({"bootstrap.servers": "k:9093", **extra}, TIMEOUT)
    assert said in str(refused.value)
    assert "s3cret" not in str(refused.value) and "\n" not in str(refused.value)
