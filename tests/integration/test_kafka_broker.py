"""The Kafka broker fixture itself (tests/kafka_broker.py), with confluent-kafka only: keyed records spread over the
partitions, the Event Hubs-style SASL listener takes the connection string and refuses anything else, delete_records
moves the log start as retention would, and a stopped and restarted broker still has its records."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.kafka_broker import KafkaBroker, Record

pytestmark = pytest.mark.integration

N = 200


def _keyed(n: int) -> list[Record]:
    return [Record(value=f'{{"id": {i}}}', key=f"user-{i % 17}", timestamp_ms=1_700_000_000_000 + i) for i in range(n)]


def _read_all(config: dict[str, Any], topic: str, partitions: int, expected: int) -> list[Any]:
    """Every record of the topic, read by assignment from offset 0 (no consumer group needed).

    An authentication failure reaches the client's error callback (then "all brokers down"): raised from there.
    """
    errors: list[KafkaError] = []
    consumer = Consumer({**config, "group.id": "fixture-test", "enable.auto.commit": False, "error_cb": errors.append})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        for _ in range(100):
            refused = [error for error in errors if error.code() == KafkaError._AUTHENTICATION]
            if refused:
                raise KafkaException(refused[0])
            for message in consumer.consume(num_messages=expected, timeout=0.2):
                if message.error() is not None:
                    raise KafkaException(message.error())
                messages.append(message)
            if len(messages) >= expected:
                return messages
        raise AssertionError(f"read {len(messages)} of {expected} records from {topic}")
    finally:
        consumer.close()


def test_keyed_records_spread_over_partitions_and_sum_to_the_end_offsets(kafka_broker: KafkaBroker) -> None:
    kafka_broker.create_topic("fixture-keyed", partitions=4)
    assert "fixture-keyed" in kafka_broker.list_topics()

    placed = kafka_broker.produce("fixture-keyed", _keyed(N))

    ends = kafka_broker.end_offsets("fixture-keyed")
    assert sorted(ends) == [0, 1, 2, 3]
    assert sum(ends.values()) == N
    assert sum(1 for offset in ends.values() if offset > 0) >= 3  # 17 keys land on more than one partition
    by_key: dict[str, set[int]] = {}
    for record, (partition, _) in zip(_keyed(N), placed, strict=True):
        by_key.setdefault(str(record.key), set()).add(partition)
    assert all(len(partitions) == 1 for partitions in by_key.values())  # one key, one partition
    assert kafka_broker.earliest_offsets("fixture-keyed") == {0: 0, 1: 0, 2: 0, 3: 0}

    kafka_broker.produce("fixture-keyed", [{"value": b"pinned", "partition": 2, "timestamp_ms": 1_700_000_999_000}])
    assert kafka_broker.end_offsets("fixture-keyed")[2] == ends[2] + 1


def test_sasl_listener_takes_the_connection_string_and_refuses_a_wrong_password(kafka_broker: KafkaBroker) -> None:
    assert kafka_broker.connection_string.startswith("Endpoint=sb://")
    assert ".servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" in (
        kafka_broker.connection_string
    )
    kafka_broker.create_topic("fixture-sasl", partitions=2)
    kafka_broker.produce("fixture-sasl", ["a", "b", "c"])

    messages = _read_all(kafka_broker.sasl_client_config(), "fixture-sasl", 2, 3)
    assert sorted(m.value() for m in messages) == [b"a", b"b", b"c"]

    wrong = kafka_broker.connection_string.replace("SharedAccessKey=", "SharedAccessKey=x")
    with pytest.raises(KafkaException) as failed:
        _read_all(kafka_broker.sasl_client_config(password=wrong), "fixture-sasl", 2, 3)
    assert failed.value.args[0].code() == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in str(failed.value)


def test_delete_records_moves_the_earliest_offset(kafka_broker: KafkaBroker) -> None:
    kafka_broker.create_topic("fixture-retention", partitions=2)
    kafka_broker.produce("fixture-retention", [Record(value=str(i), partition=i % 2) for i in range(20)])

    low = kafka_broker.delete_records("fixture-retention", {0: 4, 1: 10})

    assert low == {0: 4, 1: 10}
    assert kafka_broker.earliest_offsets("fixture-retention") == {0: 4, 1: 10}
    assert kafka_broker.end_offsets("fixture-retention") == {0: 10, 1: 10}


def test_a_restarted_broker_keeps_its_records(restartable_kafka_broker: KafkaBroker) -> None:
    broker = restartable_kafka_broker
    broker.create_topic("fixture-restart")
    broker.produce("fixture-restart", _keyed(40))
    before = broker.end_offsets("fixture-restart")
    first_pid = broker.pid

    with broker.down():
        assert broker.pid is None
    assert broker.pid not in (None, first_pid)
    assert broker.end_offsets("fixture-restart") == before
    broker.produce("fixture-restart", _keyed(10))
    assert sum(broker.end_offsets("fixture-restart").values()) == 50

    broker.stop(graceful=False)  # a crash: the log is recovered at the next start
    broker.start()
    assert sum(broker.end_offsets("fixture-restart").values()) == 50
    messages = _read_all(broker.sasl_client_config(), "fixture-restart", 4, 50)
    assert len(messages) == 50
