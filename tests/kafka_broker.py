"""A real Apache Kafka broker for the Kafka tests: single-node KRaft on 127.0.0.1, free ports, no Docker.

The broker runs from Apache Kafka's own jars (pinned by tools/kafka/pom.xml; `make kafka` writes their classpath to
tools/kafka/classpath.txt) in one JVM that is broker and controller at once. It has two client listeners:

- PLAINTEXT (`bootstrap`), for the helpers below and tests that do not care about authentication;
- SASL_PLAINTEXT with mechanism PLAIN (`sasl_bootstrap`), set up the way Azure Event Hubs' Kafka endpoint is used:
  user name `$ConnectionString`, password an Event Hubs connection string (a fake one, random per broker).

`kafka_broker` is one broker per test session; `restartable_kafka_broker` is a test's own broker, to stop and start
again on the same ports and log dir (a broker outage in the middle of a run). Both are stopped by pid in teardown.

Start time: about 1.0-1.5 s on 2 cores (0.6 s to format the log dir, then the broker), 2-3 s without the class
data sharing archive the first broker run writes (see `_class_archive`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.servers import _stop, _wait_for_port, free_port

ROOT = Path(__file__).resolve().parents[1]
KAFKA_TOOLS = ROOT / "tools" / "kafka"
CLASSPATH_FILE = KAFKA_TOOLS / "classpath.txt"
LOG4J_CONFIG = KAFKA_TOOLS / "log4j2.properties"
# Class data sharing archives of the broker JVM (gitignored, rebuilt when the jars or the JDK change).
ARCHIVE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark-ci" / "kafka-cds"

# Event Hubs' Kafka endpoint takes this literal user name, with the namespace's connection string as password.
EVENT_HUBS_USER = "$ConnectionString"
TIMEOUT_S = 30.0

# Small heap, one-core-friendly collector, C1 only: the broker serves tests, not throughput (C1 alone starts
# ~0.7 s faster here; the collector choice is noise next to that).
JVM_FLAGS = ["-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


@dataclass(frozen=True)
class Record:
    """One record to produce: no partition means the key's partition (Java's murmur2, as Spark's producer uses)."""

    value: bytes | str | None
    key: bytes | str | None = None
    partition: int | None = None
    timestamp_ms: int | None = None


def event_hubs_connection_string(namespace: str, key: str) -> str:
    """The shape of an Azure Event Hubs namespace connection string."""
    return (
        f"Endpoint=sb://{namespace}.servicebus.windows.net/;"
        f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key}"
    )


def _fake_connection_string() -> str:
    # A real SharedAccessKey is 32 random bytes in base64 (44 characters, ending in "=").
    key = base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    return event_hubs_connection_string(f"tidemark-{secrets.token_hex(4)}", key)


def _cluster_id() -> str:
    """A KRaft cluster id as `kafka-storage random-uuid` makes it, without starting a JVM for it.

    16 random bytes in URL-safe base64 without padding; like Kafka's Uuid.randomUuid, never one starting with "-"
    (the storage tool would read it as an option).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _classpath() -> str:
    if not CLASSPATH_FILE.exists():
        raise RuntimeError("the Kafka broker's classpath is missing: run `make kafka` (Maven, tools/kafka/pom.xml)")
    classpath = CLASSPATH_FILE.read_text(encoding="utf-8").strip()
    missing = [jar for jar in classpath.split(os.pathsep) if not Path(jar).exists()]
    if missing:
        raise RuntimeError(f"{len(missing)} Kafka jars are gone from ~/.m2 (first: {missing[0]}): run `make kafka`")
    # Pinned like tidemark's own jars: each one's sha256 and size against tools/kafka/broker.lock.json.
    spec = importlib.util.spec_from_file_location("kafka_broker_lock", CLASSPATH_FILE.with_name("lock.py"))
    assert spec is not None and spec.loader is not None
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    problems = lock.problems([Path(j) for j in classpath.split(os.pathsep)], json.loads(lock.LOCK.read_text()))
    if problems:
        raise RuntimeError(f"the Kafka broker's jars do not match tools/kafka/broker.lock.json: {problems[0]}")
    return classpath


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("the Kafka broker needs Java 17 or newer on PATH (or JAVA_HOME)")
    return java


def _class_archive(java: str, classpath: str) -> tuple[Path, bool]:
    """The class data sharing archive for this classpath and JDK, and whether it exists yet.

    Loading the broker's ~5,000 classes from a dynamic CDS archive (JDK 13+) instead of 46 jars halves the broker's
    start (1.7 s -> 1.0 s here) and the storage tool's (0.65 -> 0.4 s). A broker started without one writes it when
    it stops (`-XX:ArchiveClassesAtExit`: about 2.5 s more at that stop, once). The archive's name is a hash of the
    JDK and the jars (paths, sizes, times), as the JVM ignores an archive whose jars changed.
    """
    files = [Path(java).resolve(), *map(Path, classpath.split(os.pathsep))]
    stamp = "\0".join(f"{file}:{file.stat().st_size}:{file.stat().st_mtime_ns}" for file in files)
    archive = ARCHIVE_DIR / f"broker-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"
    return archive, archive.exists()


@dataclass(frozen=True)
class KafkaBroker:
    """A running single-node Kafka broker (KRaft) on 127.0.0.1, with helpers built on confluent-kafka."""

    port: int
    sasl_port: int
    controller_port: int
    connection_string: str
    folder: Path
    _process: _BrokerProcess = field(repr=False, compare=False)

    @property
    def bootstrap(self) -> str:
        """PLAINTEXT listener: bootstrap.servers for clients without authentication."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """SASL_PLAINTEXT listener, mechanism PLAIN, user `$ConnectionString`, password `connection_string`."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def pid(self) -> int | None:
        """The broker JVM's pid, None while stopped."""
        return self._process.pid

    def sasl_jaas_config(self, password: str | None = None) -> str:
        """The client JAAS line a Java client (Spark's `kafka.sasl.jaas.config`) uses for Event Hubs."""
        secret = self.connection_string if password is None else password
        return (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{EVENT_HUBS_USER}" password="{secret}";'
        )

    def sasl_client_config(self, password: str | None = None) -> dict[str, str]:
        """confluent-kafka settings for the SASL listener (the connection string unless `password` is given)."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": EVENT_HUBS_USER,
            "sasl.password": self.connection_string if password is None else password,
        }

    def spark_sasl_options(self, password: str | None = None) -> dict[str, str]:
        """Spark Kafka source options for the SASL listener, as a user sets them for Event Hubs."""
        return {
            "kafka.bootstrap.servers": self.sasl_bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": self.sasl_jaas_config(password),
        }

    def admin(self) -> AdminClient:
        """The broker's admin client (one while it runs: a collected client fails its futures with _DESTROY)."""
        return self._process.admin()

    def create_topic(self, name: str, partitions: int = 4) -> None:
        """Create a topic and wait until every partition has a leader."""
        admin = self.admin()
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=TIMEOUT_S).topics.get(name)
            if (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} has no leader for all {partitions} partitions after {TIMEOUT_S} s")

    def list_topics(self) -> list[str]:
        """The topics, without Kafka's internal ones (`__consumer_offsets`...), sorted."""
        topics = self.admin().list_topics(timeout=TIMEOUT_S).topics
        return sorted(name for name in topics if not name.startswith("__"))

    def produce(self, topic: str, records: Iterable[Record | Mapping[str, Any] | bytes | str]) -> list[tuple[int, int]]:
        """Produce and wait for every acknowledgement; (partition, offset) of each record, in order.

        A record is a `Record`, a mapping with its fields (`{"key": ..., "value": ...}`), or a bare value.
        """
        producer = self._process.producer()
        results: list[tuple[int, int] | None] = []
        errors: list[str] = []

        def delivered(index: int) -> Any:
            def callback(error: Any, message: Any) -> None:
                if error is not None:
                    errors.append(str(error))
                else:
                    results[index] = (message.partition(), message.offset())

            return callback

        for index, item in enumerate(records):
            record = _as_record(item)
            results.append(None)
            kwargs: dict[str, Any] = {"value": record.value, "key": record.key, "on_delivery": delivered(index)}
            if record.partition is not None:
                kwargs["partition"] = record.partition
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(TIMEOUT_S)
        if errors or remaining:
            raise RuntimeError(f"producing to {topic}: {remaining} unacknowledged, errors: {errors[:3]}")
        placed = [result for result in results if result is not None]
        self._wait_visible(topic, placed)
        return placed

    def _wait_visible(self, topic: str, placed: list[tuple[int, int]]) -> None:
        """Return once a reader's latest offsets (the high watermark) cover every acknowledged record. A run
        started right after produce fixes its end offsets then: a record acknowledged but not yet below the high
        watermark would be left out. (A Kafka recovery test's first run read 16 of a partition's 17 records, and
        the window of the one it left out was missing; the wait is the likely cure, not a proven one.)"""
        needed: dict[int, int] = {}
        for partition, offset in placed:
            needed[partition] = max(needed.get(partition, 0), offset + 1)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            ends = self.end_offsets(topic)
            short = {p: (ends.get(p, 0), n) for p, n in needed.items() if ends.get(p, 0) < n}
            if not short:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"producing to {topic}: acknowledged records not readable: {short}")
            time.sleep(0.05)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> the offset the next record will get (the high watermark)."""
        return self._offsets(topic, OffsetSpec.latest())

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> the first offset still in the log (moves on with retention and `delete_records`)."""
        return self._offsets(topic, OffsetSpec.earliest())

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Delete every record below the given offset of each partition, as retention would; the new log starts."""
        partitions = [TopicPartition(topic, partition, offset) for partition, offset in before.items()]
        admin = self.admin()
        futures = admin.delete_records(partitions, request_timeout=TIMEOUT_S)
        return {tp.partition: future.result(timeout=TIMEOUT_S).low_watermark for tp, future in futures.items()}

    def stop(self, graceful: bool = True) -> None:
        """Stop the broker (SIGTERM, a controlled shutdown; SIGKILL with graceful=False, a crash). Data stays."""
        self._process.stop(graceful)

    def start(self) -> None:
        """Start the stopped broker again: same ports, same log dir, same cluster."""
        self._process.start()

    @contextlib.contextmanager
    def down(self, graceful: bool = True) -> Iterator[None]:
        """`with broker.down(): ...` runs the block with the broker stopped, and starts it again after."""
        self.stop(graceful)
        try:
            yield
        finally:
            self.start()

    def _offsets(self, topic: str, spec: OffsetSpec) -> dict[int, int]:
        admin = self.admin()
        metadata = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        if metadata.error is not None:
            raise KafkaException(metadata.error)
        request = {TopicPartition(topic, partition): spec for partition in metadata.partitions}
        futures = admin.list_offsets(request, request_timeout=TIMEOUT_S)
        return {tp.partition: future.result(timeout=TIMEOUT_S).offset for tp, future in sorted(futures.items())}


def _as_record(item: Record | Mapping[str, Any] | bytes | str) -> Record:
    if isinstance(item, Record):
        return item
    if isinstance(item, bytes | str):
        return Record(item)
    return Record(**item)


class _BrokerProcess:
    """The broker JVM of one KafkaBroker: its configuration on disk and, while running, its process."""

    def __init__(self, folder: Path, ports: tuple[int, int, int], connection_string: str) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port, self.sasl_port, self.controller_port = ports
        self.log = folder / "broker.log"
        self.properties = folder / "server.properties"
        self.java = _java()
        self.classpath = _classpath()
        self.archive, self.archived = _class_archive(self.java, self.classpath)
        self.process: subprocess.Popen[bytes] | None = None
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._archive_draft = self.archive.with_name(f"{self.archive.name}.{secrets.token_hex(6)}.draft")
        self._write_properties(connection_string)
        self._format()

    @property
    def pid(self) -> int | None:
        return None if self.process is None or self.process.poll() is not None else self.process.pid

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"})
        return self._admin

    def producer(self) -> Producer:
        """One idempotent producer while the broker runs: a new one spends 0.5-1 s getting its producer id."""
        if self._producer is None:
            self._producer = Producer(
                {
                    "bootstrap.servers": f"127.0.0.1:{self.port}",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    # librdkafka's default partitioner hashes keys with CRC32; Java clients use murmur2.
                    "partitioner": "murmur2_random",
                }
            )
        return self._producer

    def _write_properties(self, connection_string: str) -> None:
        # The JAAS value is quoted: the connection string's "=" and ";" stay part of the password.
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{EVENT_HUBS_USER}="{connection_string}";'
        )
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port},"
                f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "log.dirs": str(self.folder / "data"),
            "num.partitions": "4",
            # Tests produce records whose timestamps are their event times, often years old: with Kafka's default
            # 7-day retention the first retention check (30 s after start) would delete them. Only delete_records
            # removes records here.
            "log.retention.ms": "-1",
            # One node: every internal topic with one replica, and few partitions (the group coordinator's
            # __consumer_offsets would otherwise get 50, created when the first consumer group appears).
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A broker that restarts after a crash (SIGKILL) waits for its old registration to expire: 9 s by
            # default, 3 s here (6 heartbeats: a busy 2-core machine does not fence a live broker).
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            # Threads sized for a 2-core test machine (defaults: 3 network, 8 I/O, 10 background).
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        self.properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")

    def _java_command(self, main: str, *args: str, write_archive: bool) -> list[str]:
        """A JVM on the Kafka classpath, with the class archive once there is one (storage tool too: 0.65 -> 0.4 s)."""
        flags = list(JVM_FLAGS)
        if self.archived:
            flags.append(f"-XX:SharedArchiveFile={self.archive}")
        elif write_archive:
            flags += [f"-XX:ArchiveClassesAtExit={self._archive_draft}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        return [self.java, *flags, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", "-cp", self.classpath, main, *args]

    def _format(self) -> None:
        """Format the log dir for KRaft: meta.properties and the bootstrap metadata (what `kafka-storage format` does).

        Not with --standalone: that writes a dynamic voter set, which conflicts with controller.quorum.voters.
        """
        command = self._java_command(
            "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(self.properties), write_archive=False
        )
        done = subprocess.run(command, capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"formatting the Kafka log dir failed ({done.returncode}): {output}")

    def start(self) -> None:
        if self.pid is not None:
            raise RuntimeError(f"the Kafka broker is already running (pid {self.pid})")
        if not self.archived:
            ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
        command = self._java_command("kafka.Kafka", str(self.properties), write_archive=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for_port(self.port, self.process, "the Kafka broker", self.log)
            _wait_for_port(self.sasl_port, self.process, "the Kafka broker's SASL listener", self.log)
            # Listening is not serving yet: wait until the broker answers a metadata request.
            try:
                self.admin().list_topics(timeout=TIMEOUT_S)
            except KafkaException as exc:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the Kafka broker listens but does not answer ({exc}): {tail}") from exc
        except BaseException:
            self.stop(graceful=False)
            raise

    def stop(self, graceful: bool = True) -> None:
        process, self.process = self.process, None
        # The clients go with the broker: a producer left behind would log a refused connection every second.
        self._admin = self._producer = None
        if process is None or process.poll() is not None:
            return
        if graceful:
            _stop(process)
        else:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self._keep_archive(process)

    def _keep_archive(self, process: subprocess.Popen[bytes]) -> None:
        """Keep the archive the JVM wrote at a clean exit (143: SIGTERM); drop a draft a kill may have cut short."""
        draft = self._archive_draft
        if self.archived or not draft.exists():
            return
        if process.returncode in (0, 143) and draft.stat().st_size > 0:
            os.replace(draft, self.archive)
            self.archived = True
            # Older archives, and drafts a killed run left (an hour old: not one another session is writing).
            for old in ARCHIVE_DIR.glob("broker-*"):
                with contextlib.suppress(FileNotFoundError):
                    stale = old.suffix == ".jsa" or time.time() - old.stat().st_mtime > 3600
                    if stale and old != self.archive:
                        old.unlink()
        else:
            draft.unlink(missing_ok=True)


def start_broker(folder: Path) -> KafkaBroker:
    """Format a new log dir under `folder` and start a broker on three free loopback ports."""
    ports: tuple[int, ...] = ()
    while len(set(ports)) != 3:
        ports = (free_port(), free_port(), free_port())
    connection_string = _fake_connection_string()
    process = _BrokerProcess(folder, (ports[0], ports[1], ports[2]), connection_string)
    process.start()
    return KafkaBroker(ports[0], ports[1], ports[2], connection_string, folder, process)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The test session's Kafka broker. Shared: do not stop it (use `restartable_kafka_broker` for that)."""
    broker = start_broker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def restartable_kafka_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A Kafka broker of the test's own, which it may stop and start again (`stop()`, `start()`, `down()`)."""
    broker = start_broker(tmp_path / "kafka")
    try:
        yield broker
    finally:
        broker.stop()
