"""Spark's Kafka source offsets as the checkpoint and the progress events hold them (Spark's format, not a client).

Spark's Kafka source writes its offsets as JSON `{"topic": {"partition": offset}}`, in `offsets/<batch>` of the
checkpoint and in each progress event's startOffset, endOffset and latestOffset. Pure functions: no client, no JVM.
The Kafka connector (sources/kafka/) builds on them; formats/progress.py reads a progress event's lag with them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Offsets = dict[TopicPartition, int]


def parse_offsets(value: Any) -> Offsets | None:
    """Offsets from Spark's Kafka JSON (text or parsed); None when the value is not Kafka offsets."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, Mapping) or not value:
        return None
    found: Offsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping):
            return None
        for partition, offset in partitions.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int) or isinstance(offset, bool):
                return None
            found[TopicPartition(str(topic), int(partition))] = offset
    return found


def offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Spark's JSON for per-partition offsets (startingOffsets, endingOffsets)."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return json.dumps(nested, separators=(",", ":"))


@dataclass(frozen=True)
class PartitionLag:
    """How far one partition's reader is behind the newest record."""

    partition: TopicPartition
    position: int  # the next offset the reader reads (Spark: a batch's endOffset)
    end: int  # the partition's end offset (Spark: latestOffset)

    @property
    def lag(self) -> int:
        """Records not read yet."""
        return max(0, self.end - self.position)


def partition_lags(position: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[PartitionLag]:
    """Per-partition lag; a partition known only at the end (new, never read) counts from offset 0."""
    return [PartitionLag(tp, position.get(tp, 0), end[tp]) for tp in sorted(end)]


def source_lags(progress: Mapping[str, Any]) -> list[PartitionLag]:
    """Per-partition lag of every Kafka source of one progress event (endOffset against latestOffset)."""
    lags: list[PartitionLag] = []
    for source in progress.get("sources") or ():
        if not isinstance(source, Mapping):
            continue
        end = parse_offsets(source.get("endOffset"))
        latest = parse_offsets(source.get("latestOffset"))
        if end is not None and latest is not None:
            lags.extend(partition_lags(end, latest))
    return lags
