"""Events for the Kafka tests, produced to the real broker, and the independent oracle of what the pipeline writes.

Each event is one record: the JSON value the pipeline parses, the user as the record key (so one user's events
stay in one partition, as a real producer keys them), and the event time as the record's timestamp (CreateTime)
unless an event is very late, which a device delivers long after it happened: its timestamp is when it arrived.
Malformed values (truncated JSON, no user, a bad time, not JSON, a null value) are known by their (partition,
offset) after producing, so a test can compare the quarantine with exactly them.

The oracle reads the produced records itself (no Spark) and takes from the checkpoint's offset log only which
offset range each micro-batch read (`offsets/<n>`, the query's initial offsets in `sources/0/0`), then applies
Spark's watermark semantics batch by batch (tests/oracles.py).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from tests.kafka_broker import KafkaBroker, Record
from tests.oracles import valid_event, window_oracle_events
from tidemark.compat import UTC

START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=15)
WATERMARK = timedelta(minutes=10)


@dataclass(frozen=True)
class KafkaEvent:
    """One record to produce."""

    value: str | None
    key: str
    timestamp_ms: int
    partition: int | None = None

    @property
    def malformed(self) -> bool:
        """True when the pipeline must quarantine it."""
        return valid_event(self.value) is None


@dataclass(frozen=True)
class Produced:
    """A record as the broker stored it."""

    event: KafkaEvent
    partition: int
    offset: int


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _malformed(rng: random.Random, good: str, kind: int) -> str | None:
    if kind == 0:
        return good[: len(good) // 2]  # truncated
    if kind == 1:
        return good.replace('"ts": "', '"ts": "not-a-time ')
    if kind == 2:
        return good.replace('"user"', '"usr"')
    if kind == 3:
        return f"not json {rng.randrange(10**6)}"
    return None  # a null value (a tombstone)


def make_events(
    count: int,
    *,
    keys: int = 12,
    seed: int = 0,
    start: datetime = START,
    span: timedelta = timedelta(hours=2),
    max_delay: timedelta = timedelta(minutes=5),
    late_fraction: float = 0.0,
    late_by: timedelta = timedelta(hours=2),
    malformed_fraction: float = 0.0,
    first_id: int = 0,
) -> list[KafkaEvent]:
    """`count` events over `span`, out of order within `max_delay`, some very late, some malformed (extra)."""
    rng = random.Random(seed)
    events: list[KafkaEvent] = []
    step = span / count
    for n in range(count):
        arrival = start + step * n
        user = f"u{rng.randrange(keys):03d}"
        if n > 0 and rng.random() < late_fraction:
            when = arrival - late_by - rng.random() * max_delay
        else:
            when = arrival - rng.random() * max_delay
        fields = {"event_id": first_id + n, "user": user, "ts": _iso(when), "value": round(rng.random() * 100, 3)}
        value = json.dumps(fields)
        # A very late event's record carries when it arrived, an on-time one its event time.
        stamp = arrival if when < arrival - max_delay else when
        events.append(KafkaEvent(value, user, _ms(stamp)))
        if rng.random() < malformed_fraction:
            kind = len(events) % 5
            events.append(KafkaEvent(_malformed(rng, value, kind), user, _ms(arrival)))
    return events


def produce(broker: KafkaBroker, topic: str, events: Sequence[KafkaEvent]) -> list[Produced]:
    """Produce the events in order and return where each landed."""
    records = [Record(value=e.value, key=e.key, partition=e.partition, timestamp_ms=e.timestamp_ms) for e in events]
    placed = broker.produce(topic, records)
    assert len(placed) == len(events)
    return [Produced(event, partition, offset) for event, (partition, offset) in zip(events, placed, strict=True)]


def _offsets_line(text: str) -> dict[str, dict[str, int]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed: dict[str, dict[str, int]] = json.loads(lines[-1].lstrip("\x00"))
    return parsed


def batch_ranges(checkpoint: Path, topic: str) -> list[dict[int, tuple[int, int]]]:
    """Per committed batch: partition -> [start, end) offsets it read, from the checkpoint's offset log."""
    initial = _offsets_line((checkpoint / "sources" / "0" / "0").read_bytes().decode("utf-8"))[topic]
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    ranges: list[dict[int, tuple[int, int]]] = []
    before = {int(p): o for p, o in initial.items()}
    for batch in range(commits[-1] + 1) if commits else []:
        end = {int(p): o for p, o in _offsets_line((checkpoint / "offsets" / str(batch)).read_text())[topic].items()}
        ranges.append({p: (before.get(p, 0), o) for p, o in end.items()})
        before = end
    return ranges


Ranges = list[dict[int, tuple[int, int]]]


def events_by_batch(produced: Sequence[Produced], ranges: Ranges) -> list[list[dict[str, object]]]:
    """The valid events each batch read (in partition and offset order: the order does not change the result)."""
    by_position = {(p.partition, p.offset): p for p in produced}
    batches: list[list[dict[str, object]]] = []
    for batch in ranges:
        events: list[dict[str, object]] = []
        for partition, (first, end) in sorted(batch.items()):
            for offset in range(first, end):
                record = by_position.get((partition, offset))
                event = valid_event(record.event.value) if record is not None else None
                if event is not None:
                    events.append(event)
        batches.append(events)
    return batches


def kafka_oracle(produced: Sequence[Produced], checkpoint: Path, topic: str) -> pd.DataFrame:
    """The final (key, window) rows the sink must hold after the committed batches of the checkpoint."""
    return window_oracle_events(events_by_batch(produced, batch_ranges(checkpoint, topic)), WINDOW, WATERMARK)


def final_windows_oracle(produced: Sequence[Produced]) -> pd.DataFrame:
    """Final rows when no event is ever dropped as late (every delay within the watermark): batching-independent."""
    events = [e for p in produced if (e := valid_event(p.event.value)) is not None]
    return window_oracle_events([events], WINDOW, WATERMARK)


def malformed_positions(produced: Sequence[Produced], topic: str) -> set[str]:
    """`topic/partition/offset` of every malformed record produced (the quarantine's `source`)."""
    return {f"{topic}/{p.partition}/{p.offset}" for p in produced if p.event.malformed}
