"""Independent batch (pandas) computations of what the streaming pipeline must produce.

They read the landing files themselves (plain json, no Spark) and model Spark's micro-batch
watermark semantics: the watermark of batch i is the newest event time of batches before i minus
the delay. Since Spark 3.4 a stateful operator judges late rows against the watermark of the
batch before (eventTimeWatermarkForLateEvents) and evicts with the current one: a (row, window)
pair is dropped when the window's end is at or before the previous batch's watermark. A window is
emitted once the final watermark reaches its end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd

from tidemark.compat import UTC


def valid_event(line: str | None, key: str = "user", ts: str = "ts") -> dict[str, object] | None:
    """One line (a file's line, a Kafka record's value) as an event, or None when it is malformed."""
    if line is None:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict) or record.get(key) is None or record.get(ts) is None:
        return None
    try:
        when = datetime.fromisoformat(str(record[ts]).replace("Z", "+00:00"))
    except ValueError:
        return None
    return {**record, ts: when.astimezone(UTC)}


def read_valid_events(files: Sequence[Path], key: str = "user", ts: str = "ts") -> list[dict[str, object]]:
    """The well-formed events of the files, in order (malformed lines skipped)."""
    events: list[dict[str, object]] = []
    for file in files:
        for line in Path(file).read_text(encoding="utf-8").splitlines():
            event = valid_event(line, key, ts)
            if event is not None:
                events.append(event)
    return events


def count_malformed(files: Sequence[Path], key: str = "user", ts: str = "ts") -> int:
    """How many lines of the files are not well-formed events."""
    total = sum(len([ln for ln in Path(f).read_text(encoding="utf-8").splitlines() if ln]) for f in files)
    return total - len(read_valid_events(files, key, ts))


def _windows(when: datetime, size: timedelta, slide: timedelta) -> list[tuple[datetime, datetime]]:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    offset = (when - epoch) % slide
    last_start = when - offset
    out = []
    start = last_start
    while start + size > when:
        out.append((start, start + size))
        start -= slide
    return out


def window_oracle(
    batches: Sequence[Sequence[Path]],
    window: timedelta,
    watermark: timedelta,
    slide: timedelta | None = None,
    key: str = "user",
    ts: str = "ts",
    value: str | None = "value",
    pending: bool = False,
) -> pd.DataFrame:
    """Final (key, window) rows for files processed batch by batch, as the pipeline writes them.

    With pending=True, the other groups instead: those whose window the watermark has not passed yet.
    """
    events = [read_valid_events(files, key, ts) for files in batches]
    return window_oracle_events(events, window, watermark, slide, key, ts, value, pending)


def window_oracle_events(
    batches: Sequence[Sequence[dict[str, object]]],
    window: timedelta,
    watermark: timedelta,
    slide: timedelta | None = None,
    key: str = "user",
    ts: str = "ts",
    value: str | None = "value",
    pending: bool = False,
) -> pd.DataFrame:
    """Final (key, window) rows for valid events processed batch by batch (each event's ts a UTC datetime)."""
    slide = slide or window
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    current_watermark = epoch
    late_watermark = epoch
    max_seen: datetime | None = None
    kept: list[dict[str, object]] = []
    for batch_events in batches:
        for event in batch_events:
            when = event[ts]
            assert isinstance(when, datetime)
            for start, end in _windows(when, window, slide):
                if end <= late_watermark:
                    continue  # dropped as late by the stateful operator
                kept.append({key: event[key], "windowStart": start, "windowEnd": end, ts: when, "v": event.get(value)})
        for event in batch_events:
            when = event[ts]
            assert isinstance(when, datetime)
            max_seen = when if max_seen is None or when > max_seen else max_seen
        late_watermark = current_watermark
        if max_seen is not None:
            current_watermark = max(current_watermark, max_seen - watermark)
    frame = pd.DataFrame(kept)
    grouped = (
        frame.groupby([key, "windowStart", "windowEnd"])
        .agg(firstEventTime=(ts, "min"), lastEventTime=(ts, "max"), count=(ts, "size"), value_sum=("v", "sum"))
        .reset_index()
    )
    final = (
        grouped[grouped["windowEnd"] <= current_watermark]
        if not pending
        else grouped[grouped["windowEnd"] > current_watermark]
    )
    return final.sort_values([key, "windowStart"]).reset_index(drop=True)


def window_state_oracle(
    batches: Sequence[Sequence[Path]], window: timedelta, watermark: timedelta, key: str = "user", ts: str = "ts"
) -> pd.DataFrame:
    """The (key, window) groups still in the aggregation's state after those batches: not final yet."""
    return window_oracle(batches, window, watermark, key=key, ts=ts, pending=True)


def assert_matches_oracle(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The sink holds exactly the oracle's (key, window) rows, each once, with the same aggregates."""
    key = ["user", "windowStart", "windowEnd"]
    assert not actual.duplicated(key).any(), "a (key, window) row was written twice"
    merged = actual.merge(expected, on=key, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    assert (merged["count"] == merged["count_oracle"]).all()
    assert (merged["firstEventTime"] == merged["firstEventTime_oracle"]).all()
    assert (merged["lastEventTime"] == merged["lastEventTime_oracle"]).all()
    assert (merged["value_sum"] - merged["value_sum_oracle"]).abs().max() < 1e-6
    assert len(actual) == len(expected)
