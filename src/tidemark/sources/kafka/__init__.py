"""The Kafka and Event Hubs source: its stream (frames), its offsets in a checkpoint (committed), the checks before
a run (start), and where a replay starts (replay); tidemark.kafka below it is the client (options, admin, offsets)."""

from __future__ import annotations

from tidemark.sources.kafka.source import KafkaSource

__all__ = ["KafkaSource"]
