"""What the Kafka connector derives from offsets: the ranges a reader needed that the topic no longer holds.

The offsets JSON itself is Spark's checkpoint and progress format (formats/kafka_offsets.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.formats.kafka_offsets import TopicPartition


@dataclass(frozen=True)
class LostRange:
    """Offsets a reader still needed that the topic no longer holds (retention, delete-records, a recreated topic)."""

    partition: TopicPartition
    first: int  # the first offset the reader needed
    available_from: int  # the topic's earliest offset now

    @property
    def records(self) -> int:
        """How many offsets are gone (transaction markers included: an upper bound on lost records)."""
        return self.available_from - self.first

    def __str__(self) -> str:
        return f"{self.partition} offsets {self.first}..{self.available_from - 1}"


def lost_ranges(needed: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int]) -> list[LostRange]:
    """The ranges between where a reader resumes and where each partition's log now starts."""
    lost = []
    for tp in sorted(needed):
        start = earliest.get(tp)
        if start is not None and needed[tp] >= 0 and start > needed[tp]:
            lost.append(LostRange(tp, needed[tp], start))
    return lost


def describe_lost(ranges: list[LostRange], limit: int = 8) -> str:
    """`events-0 offsets 0..99, events-2 offsets 5..9 (and 3 more)`."""
    shown = ", ".join(str(r) for r in ranges[:limit])
    more = len(ranges) - limit
    return f"{shown} (and {more} more)" if more > 0 else shown
