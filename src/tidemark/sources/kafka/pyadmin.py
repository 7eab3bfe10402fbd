"""Kafka's topics and offsets without a JVM: librdkafka (confluent-kafka), for a Spark Connect client.

A Connect client has no JVM in its process, so Kafka's Java admin client (admin.py) cannot run there. This one
answers the same questions (the source's topics and partition counts, earliest, latest and by-time offsets) from
the same `kafka.*` options, translated to librdkafka's names: bootstrap servers, the security protocol, SASL PLAIN
and SCRAM (user and password read from the JAAS line; Event Hubs' `$ConnectionString` is one of these). What
librdkafka cannot take (a Java trust or key store, another SASL mechanism, an OAuth callback class) is refused in
one line naming the option. Installed with tidemark's `connect` extra.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any

from tidemark.errors import SourceError
from tidemark.formats.kafka_offsets import Offsets, TopicPartition
from tidemark.secrets import redact
from tidemark.sources.kafka.admin import TopicQueries
from tidemark.sources.kafka.options import KafkaAccess

_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Java client properties with no librdkafka counterpart that change who or how it connects: refused, not dropped.
_JAVA_ONLY = ("ssl.truststore.", "ssl.keystore.", "sasl.login.callback.handler.class", "sasl.client.callback")


def librdkafka_config(client: Mapping[str, str], timeout: timedelta) -> dict[str, str | int | float | bool]:
    """librdkafka's settings for Kafka's Java client properties (what tidemark asks only: metadata and offsets)."""
    for key in client:
        if key.startswith(_JAVA_ONLY):
            msg = (
                f"the Kafka option kafka.{key} is a Java client's: it has no equivalent without a JVM, so this "
                "Kafka source cannot be read over Spark Connect (run without SPARK_REMOTE)"
            )
            raise SourceError(msg)
    millis = str(int(timeout.total_seconds() * 1000))
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": client["bootstrap.servers"],
        "client.id": "tidemark-admin",
        "socket.timeout.ms": millis,
        "socket.connection.setup.timeout.ms": millis,
        "log_level": "0",  # tidemark reports a failure in one line; librdkafka's own log stays quiet
    }
    if "security.protocol" in client:
        conf["security.protocol"] = client["security.protocol"]
    mechanism = client.get("sasl.mechanism")
    if mechanism is not None:
        if mechanism.upper() not in _MECHANISMS:
            msg = (
                f"the SASL mechanism {mechanism} is not available without a JVM (over Spark Connect: PLAIN, "
                "SCRAM-SHA-256 or SCRAM-SHA-512); run without SPARK_REMOTE"
            )
            raise SourceError(msg)
        conf["sasl.mechanisms"] = mechanism.upper()
    jaas = client.get("sasl.jaas.config")
    if jaas is not None:
        fields = {name: value.replace('\\"', '"') for name, value in _JAAS_FIELD.findall(jaas)}
        if "username" not in fields or "password" not in fields:
            msg = "kafka.sasl.jaas.config has no username and password: over Spark Connect only PLAIN and SCRAM work"
            raise SourceError(msg)
        conf["sasl.username"], conf["sasl.password"] = fields["username"], fields["password"]
    return conf


def _specs() -> Any:
    """confluent-kafka's OffsetSpec (its stubs type none of it)."""
    import importlib

    module: Any = importlib.import_module("confluent_kafka.admin")
    return module.OffsetSpec


class PythonKafkaAdmin(TopicQueries):
    """The same queries as admin.KafkaAdmin, through librdkafka; a context manager."""

    def __init__(self, access: KafkaAccess, timeout: timedelta) -> None:
        self.access = access
        self.endpoint = access.endpoint
        self.timeout = timeout
        self._client: Any = None

    def __enter__(self) -> PythonKafkaAdmin:
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError:  # the connect extra is not installed
            msg = (
                "reading Kafka's offsets over Spark Connect needs confluent-kafka (no JVM here for Kafka's Java "
                "client): pip install 'tidemark[connect]'"
            )
            raise SourceError(msg) from None
        self._client = AdminClient(librdkafka_config(self.access.client, self.timeout))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._client = None  # librdkafka's handle closes when collected

    def _seconds(self) -> float:
        return self.timeout.total_seconds()

    def _error(self, exc: BaseException, doing: str) -> SourceError:
        text = str(exc)
        where = self.endpoint.describe()
        if "SASL" in text and ("fail" in text.lower() or "auth" in text.lower()):
            user = self.endpoint.user or "(from kafka.sasl.jaas.config)"
            source = f": check the secret in {self.endpoint.credential}" if self.endpoint.credential else ""
            line = f"Kafka authentication failed at {self.endpoint.bootstrap_servers} for user {user}{source}"
        elif "TIMED_OUT" in text or "TRANSPORT" in text or "timed out" in text.lower():
            line = (
                f"Kafka at {where} did not answer within {self._seconds():g} s: check bootstrap_servers, the network "
                "and the security protocol (or raise [source] connect_timeout)"
            )
        else:
            line = f"{doing} at {where}: {text.splitlines()[0][:300] if text else type(exc).__name__}"
        return SourceError(redact(line))

    def _metadata(self) -> Any:
        try:
            return self._client.list_topics(timeout=self._seconds())
        except Exception as exc:
            raise self._error(exc, "listing topics") from None

    def topics(self) -> list[str]:
        """Every topic but Kafka's internal ones, sorted."""
        return sorted(name for name in self._metadata().topics if not name.startswith("__"))

    def matching(self, pattern: str) -> list[str]:
        """The topics a Java regular expression matches in full, matched by Python's (they agree on the patterns
        topic names need)."""
        compiled = re.compile(pattern)
        return [t for t in self.topics() if compiled.fullmatch(t)]

    def partition_counts(self, wanted: list[str]) -> dict[str, int]:
        """Topic -> its partition count, for topics the cluster has."""
        metadata = self._metadata().topics
        return {topic: len(metadata[topic].partitions) for topic in wanted}

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec: Any, doing: str) -> dict[TopicPartition, int]:
        from confluent_kafka import TopicPartition as Partition

        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        request = {Partition(tp.topic, tp.partition): spec for tp in wanted}
        try:
            futures = self._client.list_offsets(request, request_timeout=self._seconds())
            answers = {(key.topic, key.partition): future.result() for key, future in futures.items()}
        except Exception as exc:
            raise self._error(exc, doing) from None
        return {tp: int(answers[(tp.topic, tp.partition)].offset) for tp in wanted}

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """Each partition's first offset still in its log."""
        return self._list_offsets(partitions, _specs().earliest(), "reading the earliest offsets")

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """Each partition's end offset (the offset the next record gets)."""
        return self._list_offsets(partitions, _specs().latest(), "reading the end offsets")

    def offsets_for_time(self, partitions: Iterable[TopicPartition], millis: int) -> dict[TopicPartition, int | None]:
        """Each partition's first offset whose record timestamp is at or after millis; None when it has none."""
        found = self._list_offsets(partitions, _specs().for_timestamp(millis), "looking up offsets by time")
        return {tp: offset if offset >= 0 else None for tp, offset in found.items()}
