"""Kafka's own Java admin client, in the Spark driver's JVM: topics, partitions, offsets, offsets for times.

Why this client: it is the one Spark's Kafka source uses (kafka-clients from tidemark's verified jar lock, on the
session's classpath already), so every `kafka.*` option a pipeline gives Spark (SASL, TLS trust stores, OAuth
callbacks, Event Hubs' settings) means the same here, and what tidemark reports is what Spark will see. A Python
client (librdkafka) takes other option names and no Java trust stores. The cost is a JVM: the run and recover
have one; `checkpoint inspect --source` starts a small local one.

Every failure becomes one SourceError line naming the endpoint and what to do; no secret is in it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.errors import SourceError
from tidemark.formats.kafka_offsets import Offsets, TopicPartition
from tidemark.secrets import redact
from tidemark.sources.kafka.options import KafkaAccess, KafkaEndpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_LIST_LIMIT = 20


def _java_classes(error: BaseException) -> list[tuple[str, str]]:
    """(class name, message) of a py4j Java error and its causes, outermost first."""
    found: list[tuple[str, str]] = []
    java = getattr(error, "java_exception", None)
    seen = 0
    while java is not None and seen < 10:
        try:
            found.append((str(java.getClass().getName()), str(java.getMessage() or "")))
            cause = java.getCause()
        except Exception:  # the gateway may be gone
            break
        java = cause if cause is not None and cause != java else None
        seen += 1
    return found


def failure_line(error: BaseException | str, endpoint: KafkaEndpoint, timeout: timedelta | None = None) -> str | None:
    """One line for a Kafka client failure found in an exception (or its text); None when it is not one."""
    if isinstance(error, str):
        text = error
        classes: list[tuple[str, str]] = []
    else:
        classes = _java_classes(error)
        text = " ".join(f"{name}: {message}" for name, message in classes) or str(error)
    names = {name.rsplit(".", 1)[-1] for name, _ in classes}
    where = endpoint.describe()
    if "SaslAuthenticationException" in names or "SaslAuthenticationException" in text:
        user = endpoint.user or "(from kafka.sasl.jaas.config)"
        source = f": check the secret in {endpoint.credential}" if endpoint.credential else ""
        return f"Kafka authentication failed at {endpoint.bootstrap_servers} for user {user}{source}"
    if "SslAuthenticationException" in names or "SSLHandshakeException" in text:
        return f"TLS handshake with Kafka at {where} failed: check security_protocol and the trust store options"
    if "TopicAuthorizationException" in names or "TopicAuthorizationException" in text:
        return f"Kafka at {where} refuses access to the topic: grant the user Read and Describe on it"
    if "No resolvable bootstrap urls" in text:
        return f"none of the bootstrap servers {endpoint.bootstrap_servers} resolves to an address: check them"
    timed_out = {"TimeoutException"} & names or "TimeoutException" in text or "timed out" in text.lower()
    if timed_out:
        within = f" within {_seconds(timeout)}" if timeout is not None else ""
        return (
            f"Kafka at {where} did not answer{within}: check bootstrap_servers, the network and the "
            "security protocol (or raise [source] connect_timeout)"
        )
    return None


def _seconds(value: timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:g} s"


def quiet_client_logs(spark: SparkSession) -> None:
    """Silence the Kafka client's own log lines in the driver JVM: tidemark reports its failures in one line.

    An authentication failure, for one, is logged by the client's NetworkClient at ERROR on every retry, beside
    the error tidemark raises for it. Only the driver's loggers change (executors log as configured).
    """
    jvm: Any = spark._jvm
    try:
        level = jvm.org.apache.logging.log4j.Level.OFF
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("org.apache.kafka", level)
    except Exception as exc:  # another logging backend: the lines stay, nothing else changes
        log.debug("cannot quiet the Kafka client's logs: %s", exc)


class OffsetsAdmin(Protocol):
    """What the Kafka connector asks a broker: the source's topics and their offsets (either client answers)."""

    def subscribed(self) -> dict[str, int]: ...

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets: ...

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets: ...

    def offsets_for_time(
        self, partitions: Iterable[TopicPartition], millis: int
    ) -> dict[TopicPartition, int | None]: ...


class TopicQueries(ABC):
    """The questions both clients answer alike from their own three: the topics, the ones a pattern matches, and
    the partition counts of topics that exist."""

    access: KafkaAccess

    @abstractmethod
    def topics(self) -> list[str]:
        """Every topic but Kafka's internal ones, sorted."""

    @abstractmethod
    def matching(self, pattern: str) -> list[str]:
        """The topics a Java regular expression (Spark's subscribePattern) matches in full."""

    @abstractmethod
    def partition_counts(self, wanted: list[str]) -> dict[str, int]:
        """Topic -> its partition count, for topics the cluster has."""

    def partitions(self, topics: Iterable[str]) -> dict[str, int]:
        """Topic -> its partition count; a SourceError naming a missing topic and the topics there are."""
        wanted = sorted(set(topics))
        present = self.topics()
        missing = [t for t in wanted if t not in present]
        if missing:
            raise SourceError(self.unknown_topic(missing[0], present))
        return self.partition_counts(wanted)

    def unknown_topic(self, topic: str, present: list[str]) -> str:
        """One line for a topic the cluster does not have, listing those it has."""
        more = len(present) - _LIST_LIMIT
        shown = ", ".join(present[:_LIST_LIMIT]) + (f" (and {more} more)" if more > 0 else "")
        there = f"topics there: {shown}" if present else "it has no topics"
        return f"topic {topic!r} does not exist at {self.access.endpoint.bootstrap_servers}; {there}"

    def subscribed(self) -> dict[str, int]:
        """The source's topics (named, or matching its pattern) and their partition counts."""
        access = self.access
        if access.topic_pattern is not None:
            topics = self.matching(access.topic_pattern)
            if not topics:
                msg = (
                    f"no topic at {access.endpoint.bootstrap_servers} matches topic_pattern "
                    f"{access.topic_pattern!r}; topics there: {', '.join(self.topics()[:_LIST_LIMIT]) or 'none'}"
                )
                raise SourceError(msg)
            return self.partitions(topics)
        return self.partitions(access.topics)


class KafkaAdmin(TopicQueries):
    """One admin client for one endpoint; use as a context manager (it closes the client)."""

    def __init__(self, spark: SparkSession, access: KafkaAccess, timeout: timedelta) -> None:
        self.access = access
        self.endpoint = access.endpoint
        self.timeout = timeout
        self._spark = spark
        self._jvm: Any = spark._jvm
        self._client: Any = None

    def __enter__(self) -> KafkaAdmin:
        jvm = self._jvm
        quiet_client_logs(self._spark)
        props = jvm.java.util.Properties()
        millis = str(int(self.timeout.total_seconds() * 1000))
        settings = {
            **self.access.client,
            "client.id": "tidemark-admin",
            "request.timeout.ms": millis,
            "default.api.timeout.ms": millis,
        }
        for key, value in settings.items():
            props.setProperty(key, value)
        try:
            self._client = jvm.org.apache.kafka.clients.admin.Admin.create(props)
        except Exception as exc:
            raise self._error(exc, "cannot create a Kafka admin client") from None
        return self

    def __exit__(self, *_: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close(self._jvm.java.time.Duration.ofSeconds(5))
            except Exception as exc:
                log.debug("closing the Kafka admin client: %s", redact(str(exc)))

    def _error(self, exc: BaseException, doing: str) -> SourceError:
        line = failure_line(exc, self.endpoint, self.timeout)
        if line is None:
            classes = _java_classes(exc)
            first = f"{classes[-1][0].rsplit('.', 1)[-1]}: {classes[-1][1]}" if classes else str(exc).splitlines()[0]
            line = f"{doing} at {self.endpoint.describe()}: {first[:300]}"
        return SourceError(redact(line))

    def _get(self, future: Any, doing: str) -> Any:
        unit = self._jvm.java.util.concurrent.TimeUnit.MILLISECONDS
        try:
            # A little longer than the client's own timeout, so its error (naming the cause) comes first.
            return future.get(int(self.timeout.total_seconds() * 1000) + 2000, unit)
        except Exception as exc:
            raise self._error(exc, doing) from None

    def topics(self) -> list[str]:
        """Every topic but Kafka's internal ones, sorted."""
        names = self._get(self._client.listTopics().names(), "listing topics")
        return sorted(str(name) for name in names)

    def partition_counts(self, wanted: list[str]) -> dict[str, int]:
        """Topic -> its partition count, for topics the cluster has."""
        jlist = self._jvm.java.util.ArrayList()
        for topic in wanted:
            jlist.add(topic)
        described = self._get(self._client.describeTopics(jlist).allTopicNames(), "describing topics")
        return {str(topic): int(described.get(topic).partitions().size()) for topic in wanted}

    def matching(self, pattern: str) -> list[str]:
        """The topics a Java regular expression matches in full (Spark's subscribePattern)."""
        compiled = self._jvm.java.util.regex.Pattern.compile(pattern)
        return [t for t in self.topics() if compiled.matcher(t).matches()]

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec: Any, doing: str) -> dict[TopicPartition, int]:
        jvm = self._jvm
        request = jvm.java.util.HashMap()
        keys: dict[TopicPartition, Any] = {}
        for tp in sorted(set(partitions)):
            keys[tp] = jvm.org.apache.kafka.common.TopicPartition(tp.topic, tp.partition)
            request.put(keys[tp], spec)
        if not keys:
            return {}
        answer = self._get(self._client.listOffsets(request).all(), doing)
        return {tp: int(answer.get(key).offset()) for tp, key in keys.items()}

    def earliest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """Each partition's first offset still in its log."""
        spec = self._jvm.org.apache.kafka.clients.admin.OffsetSpec.earliest()
        return self._list_offsets(partitions, spec, "reading the earliest offsets")

    def latest(self, partitions: Iterable[TopicPartition]) -> Offsets:
        """Each partition's end offset (the offset the next record gets)."""
        spec = self._jvm.org.apache.kafka.clients.admin.OffsetSpec.latest()
        return self._list_offsets(partitions, spec, "reading the end offsets")

    def offsets_for_time(self, partitions: Iterable[TopicPartition], millis: int) -> dict[TopicPartition, int | None]:
        """Each partition's first offset whose record timestamp is at or after millis; None when it has none."""
        spec = self._jvm.org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(millis)
        found = self._list_offsets(partitions, spec, "looking up offsets by time")
        return {tp: offset if offset >= 0 else None for tp, offset in found.items()}


def all_partitions(counts: dict[str, int]) -> list[TopicPartition]:
    """Every partition of topics with these partition counts."""
    return [TopicPartition(topic, p) for topic, count in sorted(counts.items()) for p in range(count)]


@contextmanager
def kafka_admin(spark: SparkSession, access: KafkaAccess, timeout: timedelta) -> Iterator[OffsetsAdmin]:
    """An open admin client for the access's endpoint, closed afterwards: Kafka's Java client in the session's JVM,
    or, for a Spark Connect session (no JVM in this process), librdkafka's (pyadmin.py) with the same answers."""
    from tidemark.connect import is_connect

    if is_connect(spark):
        from tidemark.sources.kafka.pyadmin import PythonKafkaAdmin

        with PythonKafkaAdmin(access, timeout) as python_admin:
            yield python_admin
        return
    with KafkaAdmin(spark, access, timeout) as admin:
        yield admin
