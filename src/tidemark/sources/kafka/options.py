"""From a Kafka or Event Hubs [source] to what Spark's Kafka source and a Kafka client need, secrets included.

Secrets are read here, when a run (or a tool) needs them, from the environment variable or file the config names;
each is remembered by tidemark.secrets so that no message shows it. `KafkaAccess` holds them and never prints
them: its repr names only the endpoint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.config.kafka import EVENT_HUBS_DOMAIN, EVENT_HUBS_USER, event_hubs_endpoint
from tidemark.errors import SourceError
from tidemark.secrets import remember

# Microsoft's recommended Kafka client settings for Event Hubs with Spark (the service closes idle connections
# after 240 s; metadata older than 180 s may name a moved partition leader). A user's own options win.
EVENT_HUBS_CLIENT_DEFAULTS = {
    "request.timeout.ms": "60000",
    "session.timeout.ms": "30000",
    "metadata.max.age.ms": "180000",
    "connections.max.idle.ms": "180000",
}
# Options only a streaming read takes; a batch re-read of one micro-batch's offset range drops them.
_STREAM_ONLY = (
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
)
_ENDPOINT = re.compile(r"(?:^|;)\s*Endpoint\s*=\s*sb://([^/;]+)", re.IGNORECASE)
_ENTITY = re.compile(r"(?:^|;)\s*EntityPath\s*=\s*([^;]+)", re.IGNORECASE)
_KEY = re.compile(r"(?:^|;)\s*(SharedAccessKey|SharedAccessSignature)\s*=", re.IGNORECASE)


@dataclass(frozen=True)
class KafkaEndpoint:
    """Where and as whom tidemark and Spark connect: everything a message may name (no secret)."""

    bootstrap_servers: str
    security_protocol: str  # PLAINTEXT unless the options or Event Hubs say otherwise
    user: str | None  # the SASL user name, when tidemark knows it
    credential: str | None  # where the secret comes from, e.g. "environment variable EH_CONNECTION"

    def describe(self) -> str:
        """`127.0.0.1:9092` or `ns.servicebus.windows.net:9093 (SASL_SSL, user $ConnectionString)`."""
        details = [] if self.security_protocol == "PLAINTEXT" else [self.security_protocol]
        if self.user:
            details.append(f"user {self.user}")
        return f"{self.bootstrap_servers} ({', '.join(details)})" if details else self.bootstrap_servers


@dataclass(frozen=True)
class KafkaAccess:
    """A Kafka client's properties (secrets included) and the source's own Spark options."""

    endpoint: KafkaEndpoint
    client: Mapping[str, str] = field(repr=False)  # Kafka client properties, without Spark's "kafka." prefix
    source: Mapping[str, str] = field(repr=False)  # Spark source options that are not client properties
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None

    def spark_options(self) -> dict[str, str]:
        """Every option of Spark's Kafka source (client properties prefixed with "kafka.")."""
        return {**{f"kafka.{k}": v for k, v in self.client.items()}, **self.source}

    def batch_options(self, start: str | None, end: str) -> dict[str, str]:
        """Options of a batch read of one offset range (JSON as in the offset log; no start: the earliest)."""
        options = {k: v for k, v in self.spark_options().items() if k not in _STREAM_ONLY}
        options["startingOffsets"] = start or "earliest"
        options["endingOffsets"] = end
        return options


def _read_env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if value is None:
        msg = f"environment variable {name} is not set: export {what} in it (or fix the [source] key naming it)"
        raise SourceError(msg)
    if not value.strip():
        msg = f"environment variable {name} is empty: it must hold {what}"
        raise SourceError(msg)
    return value.strip()


def _read_file(path: str, what: str) -> str:
    try:
        value = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        msg = f"{path} does not exist: it must hold {what}"
        raise SourceError(msg) from exc
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read {path} ({type(exc).__name__}): it must hold {what} as UTF-8 text"
        raise SourceError(msg) from exc
    if not value.strip():
        msg = f"{path} is empty: it must hold {what}"
        raise SourceError(msg)
    return value.strip()


def _secret_options(config: TidemarkConfig) -> dict[str, str]:
    """The options whose values come from environment variables and files, read now."""
    source = config.source
    found: dict[str, str] = {}
    for option, variable in source.options_from_env.items():
        found[option] = _read_env(variable, f"the value of {option}")
    for option, path in source.options_from_file.items():
        found[option] = _read_file(path, f"the value of {option}")
    remember(*found.values())
    return found


def connection_string(config: TidemarkConfig) -> tuple[str, str]:
    """The Event Hubs connection string and where it came from; checked against the config, never shown."""
    source = config.source
    if source.connection_string_env:
        where = f"environment variable {source.connection_string_env}"
        value = _read_env(source.connection_string_env, "the Event Hubs connection string")
    else:
        assert source.connection_string_file is not None
        where = f"file {source.connection_string_file}"
        value = _read_file(source.connection_string_file, "the Event Hubs connection string")
    remember(value)
    if any(ch in value for ch in '"\\\r\n'):
        msg = f"the connection string in {where} holds a quote, a backslash or a line break: copy it again"
        raise SourceError(msg)
    endpoint = _ENDPOINT.search(value)
    if endpoint is None or _KEY.search(value) is None:
        msg = (
            f"the value in {where} is not an Event Hubs connection string (Endpoint=sb://...;"
            "SharedAccessKeyName=...;SharedAccessKey=...): copy it from the namespace's Shared access policies"
        )
        raise SourceError(msg)
    host = endpoint.group(1).strip().lower()
    expected = f"{(source.namespace or '').lower()}.{EVENT_HUBS_DOMAIN}"
    if source.bootstrap_servers is None and host != expected:
        msg = f"the connection string in {where} is for {host}, but [source] namespace is {source.namespace!r}"
        raise SourceError(msg)
    entity = _ENTITY.search(value)
    if entity is not None and source.event_hub and entity.group(1).strip() != source.event_hub:
        msg = (
            f"the connection string in {where} is for event hub {entity.group(1).strip()!r}, "
            f"but [source] event_hub is {source.event_hub!r}"
        )
        raise SourceError(msg)
    return value, where


def _jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{password}";'


def _subscription(config: TidemarkConfig) -> dict[str, str]:
    source = config.source
    if source.topic_pattern:
        return {"subscribePattern": source.topic_pattern}
    return {"subscribe": ",".join(source.topics)}


def _source_options(config: TidemarkConfig) -> dict[str, str]:
    source = config.source
    options = {**_subscription(config), **source.starting_position.options()}
    if source.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    if source.min_partitions is not None:
        options["minPartitions"] = str(source.min_partitions)
    options["failOnDataLoss"] = str(source.fail_on_data_loss).lower()
    return options


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def kafka_access(config: TidemarkConfig) -> KafkaAccess:
    """Everything needed to read the config's Kafka or Event Hubs source, secrets read from where it says."""
    source = config.source
    if not source.is_kafka:
        msg = f"[source] format {source.format.value!r} is not read from Kafka"
        raise SourceError(msg)
    client: dict[str, str] = {}
    spark_own: dict[str, str] = {}
    for key, value in {**source.options, **_secret_options(config)}.items():
        if key.lower().startswith("kafka."):
            client[key[len("kafka.") :]] = _as_text(value)
        else:
            spark_own[key] = _as_text(value)
    if source.format is SourceFormat.EVENTHUBS:
        password, where = connection_string(config)
        protocol = source.security_protocol or "SASL_SSL"
        servers = source.bootstrap_servers or event_hubs_endpoint(source.namespace or "")
        client = {
            **EVENT_HUBS_CLIENT_DEFAULTS,
            **client,
            "bootstrap.servers": servers,
            "security.protocol": protocol,
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": _jaas(EVENT_HUBS_USER, password),
        }
        remember(client["sasl.jaas.config"])
        endpoint = KafkaEndpoint(servers, protocol, EVENT_HUBS_USER, where)
    else:
        servers = source.bootstrap_servers or ""
        client = {**client, "bootstrap.servers": servers}
        protocol = client.get("security.protocol", "PLAINTEXT").upper()
        user = _jaas_user(client.get("sasl.jaas.config", ""))
        secret_from = [f"environment variable {v}" for v in source.options_from_env.values()]
        secret_from += [f"file {p}" for p in source.options_from_file.values()]
        endpoint = KafkaEndpoint(servers, protocol, user, ", ".join(secret_from) or None)
    return KafkaAccess(
        endpoint=endpoint,
        client=client,
        source={**_source_options(config), **spark_own},
        topics=source.topics,
        topic_pattern=source.topic_pattern,
    )


def _jaas_user(jaas: str) -> str | None:
    match = re.search(r'username\s*=\s*"([^"]*)"', jaas)
    return match.group(1) if match else None
