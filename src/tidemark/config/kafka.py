"""What a Kafka or Event Hubs [source] may say: its starting position, and which options it must not hold.

Pure checks on the config's values (no environment, no network): secrets are refused here, wherever the TOML
puts them, so they never enter the config model, its dumps, or anything derived from it. Their values come from
an environment variable or a file at run time (tidemark.sources.kafka.options).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tidemark.compat import UTC

EVENT_HUBS_PORT = 9093
EVENT_HUBS_DOMAIN = "servicebus.windows.net"
EVENT_HUBS_USER = "$ConnectionString"

# Kafka client settings that hold a credential (Kafka's PASSWORD-typed configs and what wraps them), matched on
# the option's name in lower case.
_SECRET_NAME = re.compile(r"jaas|password|secret|ssl\.keystore\.key$|connection[._]?string|sharedaccesskey")
# Values that are a credential whatever the option is called: a JAAS line with a password, an Event Hubs or
# Service Bus connection string or SAS token.
_SECRET_VALUE = re.compile(r"password\s*=|sharedaccesskey\s*=|sharedaccesssignature|endpoint=sb://", re.IGNORECASE)

# Spark Kafka source options that [source] sets from its own keys: the key to use instead.
TYPED_OPTIONS = {
    "kafka.bootstrap.servers": "bootstrap_servers",
    "subscribe": "topic",
    "subscribepattern": "topic_pattern",
    "assign": "topic or topic_pattern",
    "startingoffsets": "starting_offsets",
    "startingtimestamp": "starting_offsets (an ISO-8601 time)",
    "maxoffsetspertrigger": "max_offsets_per_trigger",
    "minpartitions": "min_partitions",
    "failondataloss": "fail_on_data_loss",
}
# Event Hubs' endpoint settings tidemark derives from namespace and the connection string.
EVENT_HUBS_OWN = {
    "kafka.security.protocol": "security_protocol",
    "kafka.sasl.mechanism": "(always PLAIN for Event Hubs)",
}


def is_secret_option(name: str, value: object) -> bool:
    """True when an option's name or value says it holds a credential."""
    return bool(_SECRET_NAME.search(name.lower()) or (isinstance(value, str) and _SECRET_VALUE.search(value)))


def secret_hint(name: str) -> str:
    """One line refusing a secret written in the TOML, saying where it goes instead (its value never shown)."""
    return (
        f"source.options.{name} holds a secret, which a config file must not: put it in an environment variable "
        f'and name that in [source] options_from_env = {{ "{name}" = "VARIABLE" }} (or a file: options_from_file)'
    )


def check_kafka_options(options: Mapping[str, object], event_hubs: bool) -> str | None:
    """None when [source] options suit a Kafka source; else one line naming the first problem."""
    for name, value in options.items():
        lower = name.lower()
        if is_secret_option(name, value):
            return secret_hint(name)
        typed = TYPED_OPTIONS.get(lower)
        if typed is not None:
            return f"source.options.{name}: set it with [source] {typed} instead"
        if event_hubs and lower in EVENT_HUBS_OWN:
            return f"source.options.{name}: tidemark sets it for Event Hubs ([source] {EVENT_HUBS_OWN[lower]})"
    return None


@dataclass(frozen=True)
class StartingPosition:
    """Where a new query starts reading: Spark's startingOffsets, or startingTimestamp (epoch ms)."""

    offsets: str | None = None  # "earliest", "latest" or per-partition JSON
    timestamp_ms: int | None = None

    def options(self) -> dict[str, str]:
        """The Spark source options this position stands for."""
        if self.timestamp_ms is not None:
            # A partition with no record at or after the time starts at its end instead of failing the query.
            return {
                "startingTimestamp": str(self.timestamp_ms),
                "startingOffsetsByTimestampStrategy": "latest",
            }
        return {"startingOffsets": self.offsets or "earliest"}


def parse_starting_position(value: object) -> StartingPosition:
    """earliest | latest | an ISO-8601 time with a zone | per-partition offsets ({"topic": {"0": 42}}, -2 earliest,
    -1 latest) as JSON text or a TOML table; ValueError with the accepted forms otherwise."""
    if isinstance(value, Mapping):
        return StartingPosition(offsets=_offsets_json(value))
    if not isinstance(value, str) or not value.strip():
        raise ValueError(_FORMS)
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return StartingPosition(offsets=text.lower())
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"starting_offsets is not valid JSON ({exc.msg}); {_FORMS}"
            raise ValueError(msg) from exc
        if not isinstance(parsed, Mapping):
            raise ValueError(_FORMS)
        return StartingPosition(offsets=_offsets_json(parsed))
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(_FORMS) from exc
    if when.tzinfo is None:
        msg = f"starting_offsets {text!r} has no time zone: add one, e.g. {text}Z"
        raise ValueError(msg)
    millis = int(when.astimezone(UTC).timestamp() * 1000)
    if millis < 0:
        msg = f"starting_offsets {text!r} is before 1970: Kafka timestamps cannot be negative"
        raise ValueError(msg)
    return StartingPosition(timestamp_ms=millis)


_FORMS = (
    'starting_offsets must be "earliest", "latest", an ISO-8601 time with a zone ("2026-01-01T00:00:00Z") or '
    'per-partition offsets like {"events": {"0": 42, "1": -2}} (-2: earliest, -1: latest)'
)


def _offsets_json(value: Mapping[object, object]) -> str:
    """Per-partition offsets as Spark's JSON, checked: topic -> partition number -> offset (>= -2)."""
    checked: dict[str, dict[str, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping) or not partitions:
            raise ValueError(_FORMS)
        checked[str(topic)] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise ValueError(_FORMS)
            checked[str(topic)][str(int(str(partition)))] = offset
    if not checked:
        raise ValueError(_FORMS)
    return json.dumps(checked, separators=(",", ":"))


def event_hubs_endpoint(namespace: str) -> str:
    """An Event Hubs namespace's Kafka endpoint."""
    return f"{namespace}.{EVENT_HUBS_DOMAIN}:{EVENT_HUBS_PORT}"
