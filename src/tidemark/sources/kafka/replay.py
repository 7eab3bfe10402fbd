"""Where a recovery replays a Kafka source from: per-partition start offsets for a resume point.

The events that can still change a window starting at or after the resume point R are those with event time >= R.
Two ways to find the first offset of each partition that may hold one:

- the offsets log, when it survives (a corrupt checkpoint): `offsets/<b>` records the watermark batch b ran with,
  which is the newest event time of every batch before b minus the watermark delay. The newest batch b whose
  predecessors saw no event at or after R starts where they ended: its start offsets are exact, whatever the
  records' Kafka timestamps;
- otherwise Kafka's offsets-for-times: the first offset whose record timestamp is at or after R minus the watermark
  delay (a record stamped when it was produced, or with its event time, is never earlier than that). A partition
  with no such record starts at its end.

The replay reads from there with the filter event time >= R; the earlier records it reads are filtered out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.formats import Checkpoint
from tidemark.formats.kafka_offsets import Offsets, offsets_json, parse_offsets
from tidemark.sources.base import EPOCH, ReplayStart, SourcePosition, newest_event
from tidemark.sources.kafka.admin import all_partitions, kafka_admin
from tidemark.sources.kafka.frames import read_kafka_range
from tidemark.sources.kafka.options import kafka_access

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def kafka_replay_start(offsets: Offsets, method: str) -> ReplayStart:
    """A replay's start: per-partition offsets (every subscribed partition named) and how they were found."""
    return ReplayStart(offsets_json(offsets), method)


def from_offsets_log(checkpoint: Checkpoint, resume_from: datetime, delay_ms: int) -> tuple[Offsets, int] | None:
    """(start offsets, batch) from a surviving offsets log: the newest batch before which no event at or after
    resume_from was read; None when the log does not reach back far enough (or holds no Kafka offsets)."""
    resume_ms = int((resume_from - EPOCH).total_seconds() * 1000)
    for batch in reversed(checkpoint.offset_batches()):
        entry = checkpoint.find_offset(batch)
        if entry is None:
            return None
        # The newest event time read before this batch: watermark + delay (0: no event yet).
        newest_before = entry.watermark_ms + delay_ms if entry.watermark_ms > 0 else None
        if newest_before is not None and newest_before >= resume_ms:
            continue
        if batch == 0:
            start = parse_offsets(checkpoint.source_initial_offsets())
        else:
            before = checkpoint.find_offset(batch - 1)
            start = parse_offsets(before.source_offsets[0]) if before and before.source_offsets else None
        return (start, batch) if start is not None else None
    return None


@dataclass(frozen=True)
class KafkaPosition(SourcePosition):
    """A Kafka job's committed position (`tidemark adopt`): the offsets its last committed batch read to, and where
    the replay of the windows still open starts (earlier: their events were read before the cut-over)."""

    committed: str  # Spark's offsets JSON of the old job's last committed batch
    replay_offsets: str  # Spark's offsets JSON the replay starts at (every subscribed partition)
    method: str  # how the replay's start was found
    arrived_since: int  # records produced after the old job's committed offsets
    foreign_topics: tuple[str, ...]  # topics the old job read that [source] does not subscribe to
    retention_gone: tuple[str, ...]  # partitions whose records the replay needs are gone (Kafka's retention)
    subscription: str  # what [source] subscribes to
    kind: str = "kafka"

    def describe(self) -> str:
        """One line for the plan."""
        committed = describe_offsets(parse_offsets(self.committed) or {})
        start = describe_offsets(parse_offsets(self.replay_offsets) or {})
        return (
            f"the old job committed {committed}; {self.arrived_since:,} record(s) arrived since; the replay reads "
            f"from {start}, found from {self.method}"
        )

    def refusal(self, resume_from: datetime) -> str | None:
        """Topics [source] does not read, or records the replay needs that Kafka's retention removed."""
        if self.foreign_topics:
            return (
                f"the old job read topic(s) {', '.join(self.foreign_topics)}, which [source] does not subscribe to "
                f"({self.subscription}): describe the old job's topics"
            )
        if self.retention_gone:
            return (
                f"Kafka's retention removed records the windows open at the cut-over (from {resume_from.isoformat()}) "
                f"need: {'; '.join(self.retention_gone[:4])}"
            )
        return None

    def replay_start(self) -> ReplayStart:
        """Where the replay starts, as `recover` states it."""
        return ReplayStart(self.replay_offsets, self.method)


def adoption_position(
    spark: SparkSession, config: TidemarkConfig, old: Checkpoint, batch: int, resume_from: datetime
) -> KafkaPosition | None:
    """Where an old plain-Spark Kafka job stood and where the replay of its open windows starts; None when the old
    checkpoint's batch holds no Kafka offsets (the job did not read Kafka, or read several sources)."""
    entry = old.find_offset(batch)
    committed = parse_offsets(entry.source_offsets[0]) if entry and len(entry.source_offsets) == 1 else None
    if committed is None:
        return None
    delay_ms = int(config.event_time.watermark.total_seconds() * 1000)
    logged = from_offsets_log(old, resume_from, delay_ms)
    with kafka_admin(spark, kafka_access(config), config.source.connect_timeout) as admin:
        partitions = all_partitions(admin.subscribed())
        foreign = tuple(sorted({tp.topic for tp in committed} - {tp.topic for tp in partitions}))
        earliest = admin.earliest(partitions)
        end = admin.latest(partitions)
        if logged is not None:
            start = {tp: logged[0].get(tp, earliest[tp]) for tp in partitions}
            method = f"the old job's offsets log (where its batch {logged[1]} started)"
        elif resume_from <= EPOCH:
            start, method = dict(earliest), "the earliest offsets (the old job emitted no window)"
        else:
            at = resume_from - config.event_time.watermark
            found = admin.offsets_for_time(partitions, int((at - EPOCH).total_seconds() * 1000))
            start = {tp: end[tp] if (first := found[tp]) is None else first for tp in partitions}
            method = f"Kafka offsets-for-times at {at.isoformat()} (the replay point minus the watermark)"
    gone = tuple(
        f"{tp} (needs {start[tp]}, earliest kept {earliest[tp]})" for tp in partitions if start[tp] < earliest[tp]
    )
    arrived = sum(max(end[tp] - committed.get(tp, earliest[tp]), 0) for tp in partitions)
    subscription = config.source.subscription
    return KafkaPosition(offsets_json(committed), offsets_json(start), method, arrived, foreign, gone, subscription)


def replay_start(spark: SparkSession, config: TidemarkConfig, resume_from: datetime) -> ReplayStart:
    """The per-partition offsets a replay from resume_from starts at (every subscribed partition named)."""
    delay_ms = int(config.event_time.watermark.total_seconds() * 1000)
    checkpoint = Checkpoint.open(config.checkpoint.location)
    logged = from_offsets_log(checkpoint, resume_from, delay_ms) if checkpoint.exists() else None
    access = kafka_access(config)
    with kafka_admin(spark, access, config.source.connect_timeout) as admin:
        partitions = all_partitions(admin.subscribed())
        earliest = admin.earliest(partitions)
        if logged is not None:
            start, batch = logged
            # A partition the log does not name appeared after it was written: from its earliest offset.
            offsets = {tp: max(start.get(tp, earliest[tp]), earliest[tp]) for tp in partitions}
            return kafka_replay_start(offsets, f"the surviving offsets log (where batch {batch} started)")
        if resume_from <= EPOCH:
            return kafka_replay_start(dict(earliest), "the earliest offsets (the sink holds no finished window)")
        at = resume_from - config.event_time.watermark
        found = admin.offsets_for_time(partitions, int((at - EPOCH).total_seconds() * 1000))
        end = admin.latest(partitions)
        offsets = {tp: end[tp] if (first := found[tp]) is None else first for tp in partitions}
    return kafka_replay_start(
        offsets, f"Kafka offsets-for-times at {at.isoformat()} (resume point minus the watermark)"
    )


def describe_offsets(offsets: Offsets, limit: int = 8) -> str:
    """`clicks-0 at 120, clicks-1 at 98`."""
    ordered = sorted(offsets.items())
    shown = ", ".join(f"{tp} at {offset}" for tp, offset in ordered[:limit])
    return shown + (f" (and {len(ordered) - limit} more)" if len(ordered) > limit else "")


def newest_kafka_event(spark: SparkSession, config: TidemarkConfig, start: Offsets) -> datetime | None:
    """The newest valid event time from the start offsets to each partition's end (a batch read of that range)."""
    if not start:
        return None
    end = {tp: -1 for tp in start}  # -1: latest, in endingOffsets
    return newest_event(config, read_kafka_range(spark, config, offsets_json(start), offsets_json(end)).frame)


def describe_kafka_replay(config: TidemarkConfig, resume_from: datetime, start: ReplayStart) -> str:
    """One line saying where the replay reads each partition from."""
    offsets = parse_offsets(start.offsets or "") or {}
    return (
        f"Kafka {config.source.subscription} from {describe_offsets(offsets)}, found from {start.method}; "
        f"keeping events with {config.event_time.column} >= {resume_from.isoformat()}"
    )
