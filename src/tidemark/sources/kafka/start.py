"""Before a Kafka or Event Hubs run starts its query: the broker answers, the topics exist, no needed data is gone.

Spark's Kafka source would find these out too, but late and unclear: an unreachable broker as a timeout after
minutes, an unknown topic as a query that waits forever, lost data as a stack trace naming one partition. Here each
is one line naming the endpoint, the topic (and the topics there are), or every lost topic-partition range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.errors import SourceError
from tidemark.formats import Checkpoint
from tidemark.formats.kafka_offsets import Offsets, TopicPartition
from tidemark.sources.kafka.admin import all_partitions, kafka_admin
from tidemark.sources.kafka.committed import committed_offsets
from tidemark.sources.kafka.offsets import LostRange, describe_lost, lost_ranges
from tidemark.sources.kafka.options import kafka_access

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class KafkaStart:
    """What the check found: the endpoint, the subscribed topics' partitions, and data lost since the last run."""

    endpoint: str
    partitions: dict[str, int]
    committed: Offsets
    lost: list[LostRange]

    @property
    def lost_records(self) -> int:
        """Offsets gone in all lost ranges."""
        return sum(r.records for r in self.lost)


def data_loss_line(lost: list[LostRange]) -> str:
    """The one line a run stops with when retention removed offsets it still needed."""
    return (
        f"data lost in Kafka: {describe_lost(lost)} were removed (retention or delete-records) before this pipeline "
        "read them; to go on without them set [source] fail_on_data_loss = false (the loss is recorded in the "
        "progress log), or recover them from another copy of the topic first"
    )


def _check_named_partitions(config: TidemarkConfig, present: set[TopicPartition]) -> None:
    """Per-partition starting offsets must name every partition (Spark asserts it, in a stack trace)."""
    from tidemark.formats.kafka_offsets import parse_offsets

    named = parse_offsets(config.source.starting_position.offsets or "")
    if named is None:
        return
    missing = sorted(present - set(named))
    if missing:
        shown = ", ".join(str(tp) for tp in missing[:8]) + (" ..." if len(missing) > 8 else "")
        msg = (
            f"[source] starting_offsets names {len(named)} partition(s) but the subscription has {len(present)}: "
            f"add {shown} (-2 for the earliest offset, -1 for the latest)"
        )
        raise SourceError(msg)


def check_kafka_start(spark: SparkSession, config: TidemarkConfig) -> KafkaStart:
    """Connect, check the topics, compare the checkpoint's committed offsets with each partition's earliest.

    Raises a one-line SourceError for an unreachable broker, failed authentication, an unknown topic, and (with
    fail_on_data_loss) for offsets the checkpoint needs that the topic no longer holds.
    """
    access = kafka_access(config)
    checkpoint = Checkpoint.open(config.checkpoint.location)
    committed = (committed_offsets(checkpoint) if checkpoint.exists() else None) or {}
    with kafka_admin(spark, access, config.source.connect_timeout) as admin:
        counts = admin.subscribed()
        present = set(all_partitions(counts))
        needed = {tp: offset for tp, offset in committed.items() if tp in present}
        earliest = admin.earliest(needed) if needed else {}
    if not committed:
        _check_named_partitions(config, present)
    lost = lost_ranges(needed, earliest)
    if lost and config.source.fail_on_data_loss:
        raise SourceError(data_loss_line(lost))
    return KafkaStart(access.endpoint.describe(), counts, committed, lost)


_DATA_LOSS_SIGNS = ("data may have been lost", "KAFKA_DATA_LOSS", "OffsetOutOfRange", "out of range")


def describe_kafka_failure(spark: SparkSession, config: TidemarkConfig, text: str) -> str | None:
    """One line for a query that failed on its Kafka source (authentication, timeout, lost data), or None."""
    from tidemark.sources.kafka.admin import failure_line

    access = kafka_access(config)
    if any(sign.lower() in text.lower() for sign in _DATA_LOSS_SIGNS):
        try:
            lost = check_kafka_start(spark, config.model_copy(update={"source": _keep_going(config)})).lost
        except SourceError:
            lost = []
        if lost:
            return data_loss_line(lost)
    line = failure_line(text, access.endpoint)
    return f"the streaming query failed: {line}" if line is not None else None


def _keep_going(config: TidemarkConfig) -> object:
    return config.source.model_copy(update={"fail_on_data_loss": False})


def kafka_backlog(spark: SparkSession, config: TidemarkConfig) -> int:
    """Records between where the next batch starts (the checkpoint, or the starting position) and the end."""
    from tidemark.formats.kafka_offsets import parse_offsets

    access = kafka_access(config)
    checkpoint = Checkpoint.open(config.checkpoint.location)
    committed = (committed_offsets(checkpoint) if checkpoint.exists() else None) or {}
    position = config.source.starting_position
    with kafka_admin(spark, access, config.source.connect_timeout) as admin:
        partitions = all_partitions(admin.subscribed())
        end = admin.latest(partitions)
        if committed:
            start = {tp: committed.get(tp, 0) for tp in partitions}
        elif position.timestamp_ms is not None:
            found = admin.offsets_for_time(partitions, position.timestamp_ms)
            start = {tp: end[tp] if (first := found[tp]) is None else first for tp in partitions}
        elif position.offsets == "latest":
            start = dict(end)
        else:
            earliest = admin.earliest(partitions)
            given = (parse_offsets(position.offsets) if position.offsets not in (None, "earliest") else None) or {}
            # Spark's JSON: -2 the earliest offset, -1 the end.
            named = {tp: given.get(tp, -2) for tp in partitions}
            start = {tp: earliest[tp] if o == -2 else end[tp] if o == -1 else o for tp, o in named.items()}
    return sum(max(0, end[tp] - start[tp]) for tp in partitions)
