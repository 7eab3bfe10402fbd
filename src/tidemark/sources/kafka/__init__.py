"""The Kafka and Event Hubs source, one connector package: its stream (frames), its offsets in a checkpoint
(committed, report), the checks before a run (start), where a replay starts (replay), its catch-up plan (catchup),
and the client it asks the broker with (options, admin, offsets). Outside this package, import from here."""

from __future__ import annotations

from tidemark.sources.kafka.catchup import KafkaCatchUpPlan
from tidemark.sources.kafka.report import KafkaPartitionReport, KafkaSourceReport, kafka_findings, kafka_report
from tidemark.sources.kafka.source import KafkaSource

__all__ = [
    "KafkaCatchUpPlan",
    "KafkaPartitionReport",
    "KafkaSource",
    "KafkaSourceReport",
    "kafka_findings",
    "kafka_report",
]
