"""A Kafka source's side of a checkpoint: each partition's committed offset and, against the broker, its lag.

The committed offset of a partition is where the next batch starts reading it: the end offsets of the newest
committed batch (`offsets/<batch>`), or the query's initial offsets (`sources/0/0`) before its first commit. A
planned but uncommitted batch is re-run from there by Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.findings import Finding, Severity
from tidemark.formats import Checkpoint
from tidemark.formats.kafka_offsets import Offsets, TopicPartition
from tidemark.sources.kafka.committed import committed_offsets, planned_offsets
from tidemark.sources.kafka.offsets import LostRange, describe_lost, lost_ranges


@dataclass(frozen=True)
class KafkaPartitionReport:
    """One partition: what the checkpoint committed and planned, and (with --source) what the broker holds."""

    topic: str
    partition: int
    committed: int | None
    planned: int | None
    earliest: int | None = None
    end: int | None = None
    lag: int | None = None  # records from the committed offset to the end (None without the broker's end offset)
    expired: bool = False  # retention removed records the next batch still needs

    @classmethod
    def of(
        cls, tp: TopicPartition, committed: int | None, planned: int | None, earliest: int | None, end: int | None
    ) -> KafkaPartitionReport:
        """One partition's figures, lag and expiry worked out."""
        # A partition the checkpoint has no offset for yet is read from its earliest record (Spark's rule for new
        # partitions), so that is where its lag starts.
        start = committed if committed is not None else (earliest or 0)
        lag = None if end is None else max(0, end - start)
        expired = committed is not None and earliest is not None and earliest > committed
        return cls(tp.topic, tp.partition, committed, planned, earliest, end, lag, expired)


@dataclass(frozen=True)
class KafkaSourceReport:
    """The Kafka source of a checkpoint, partition by partition."""

    partitions: list[KafkaPartitionReport]
    broker: str | None = None  # the endpoint read with --source
    total_lag: int | None = None

    @property
    def lost(self) -> list[LostRange]:
        """The ranges the next batch needs that the topic no longer holds."""
        committed: dict[TopicPartition, int] = {}
        earliest: dict[TopicPartition, int] = {}
        for p in self.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if p.committed is not None:
                committed[tp] = p.committed
            if p.earliest is not None:
                earliest[tp] = p.earliest
        return lost_ranges(committed, earliest)


def kafka_report(
    checkpoint: Checkpoint,
    earliest: Offsets | None = None,
    end: Offsets | None = None,
    broker: str | None = None,
) -> KafkaSourceReport | None:
    """The checkpoint's Kafka offsets (None when its source is not Kafka), with the broker's when given."""
    committed = committed_offsets(checkpoint)
    planned = planned_offsets(checkpoint)
    if committed is None and planned is None:
        return None
    known = set(committed or {}) | set(planned or {}) | set(end or {})
    partitions = [
        KafkaPartitionReport.of(
            tp, (committed or {}).get(tp), (planned or {}).get(tp), (earliest or {}).get(tp), (end or {}).get(tp)
        )
        for tp in sorted(known)
    ]
    lags = [p.lag for p in partitions if p.lag is not None]
    return KafkaSourceReport(partitions, broker, sum(lags) if end is not None else None)


def kafka_findings(report: KafkaSourceReport | None) -> list[Finding]:
    """OFFSETS_EXPIRED: the committed offsets are older than the topic's earliest (the data is gone)."""
    if report is None or not report.lost:
        return []
    lost = report.lost
    message = (
        f"the next batch starts below the topic's earliest offsets: {describe_lost(lost)} were removed "
        f"(retention or delete-records) before this query read them ({sum(r.records for r in lost):,} offsets)"
    )
    fix = (
        "the run stops on it with fail_on_data_loss = true (the default); to go on without those records set "
        "[source] fail_on_data_loss = false (the loss is recorded in the progress log), and raise the topic's "
        "retention.ms so a stopped pipeline does not lose data again"
    )
    return [Finding("OFFSETS_EXPIRED", Severity.ERROR, message, fix)]
