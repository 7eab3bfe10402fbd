"""Realistic test events as JSON-lines files: out of order, some very late, some malformed."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from tidemark.compat import UTC
from tidemark.errors import UsageError
from tidemark.steps import step

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
_MTIME_BASE = 1_767_225_600  # 2026-01-01: landing files get increasing modification times in arrival order


@dataclass(frozen=True)
class GenerateResult:
    """What `generate` wrote."""

    directory: Path
    files: tuple[Path, ...]
    events: int
    late_events: int
    malformed_lines: int
    keys: int
    first_event_time: datetime
    last_event_time: datetime


def _iso_ms(epoch_ms: int) -> str:
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _malformed(rng: random.Random, good: str) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return good[: max(1, len(good) // 2)]  # truncated line
    if kind == 1:
        return good.replace('"ts": "', '"ts": "not-a-time ')  # unparseable event time
    if kind == 2:
        return good.replace('"user"', '"usr"')  # missing key column
    return "this is not json " + str(rng.randrange(10**6))


def generate_events(
    directory: str | Path,
    events: int,
    keys: int,
    files: int,
    seed: int = 0,
    late_fraction: float = 0.0,
    malformed_fraction: float = 0.0,
    span: timedelta = timedelta(hours=6),
    max_delay: timedelta = timedelta(minutes=5),
    late_by: timedelta = timedelta(hours=2),
    start: datetime = DEFAULT_START,
) -> GenerateResult:
    """Write `events` events over `keys` keys into `files` files named in arrival order.

    Arrival time advances evenly over `span`; each event's time is its arrival time minus a random
    delay up to `max_delay` (out of order within the watermark when max_delay < watermark). A
    `late_fraction` of events (never in the first file) lag `late_by` behind, far past any sane
    watermark. A `malformed_fraction` of extra lines are broken in one of four ways.
    """
    if events < 1 or keys < 1 or files < 1:
        msg = "--events, --keys and --files must each be at least 1"
        raise UsageError(msg)
    if not 0 <= late_fraction < 1 or not 0 <= malformed_fraction < 1:
        msg = "--late-fraction and --malformed-fraction must be between 0 and 1"
        raise UsageError(msg)
    files = min(files, events)
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not security
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    start_ms = round(start.timestamp() * 1000)
    step_ms = span.total_seconds() * 1000 / events
    delay_ms = max_delay.total_seconds() * 1000
    late_ms = late_by.total_seconds() * 1000
    per_file = -(-events // files)
    width = len(str(files))
    written: list[Path] = []
    late = malformed = 0
    first_ms: int | None = None
    last_ms: int | None = None
    with step(f"writing {events:,} events to {out}: files", total=files) as advance:
        for index in range(files):
            lines: list[str] = []
            for n in range(index * per_file, min(events, (index + 1) * per_file)):
                arrival = start_ms + step_ms * n
                if index > 0 and rng.random() < late_fraction:
                    event_ms = int(arrival - late_ms - rng.random() * delay_ms)
                    late += 1
                else:
                    event_ms = int(arrival - rng.random() * delay_ms)
                first_ms = event_ms if first_ms is None or event_ms < first_ms else first_ms
                last_ms = event_ms if last_ms is None or event_ms > last_ms else last_ms
                line = (
                    f'{{"event_id": {n}, "user": "u{rng.randrange(keys):06d}", '
                    f'"ts": "{_iso_ms(event_ms)}", "value": {round(rng.random() * 100, 3)}}}'
                )
                lines.append(line)
                if rng.random() < malformed_fraction:
                    lines.append(_malformed(rng, line))
                    malformed += 1
            path = out / f"events-{index:0{width}d}.json"
            tmp = out / f".{path.name}.tmp"
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            os.replace(tmp, path)
            # The file source takes files oldest first: make modification order equal arrival order.
            os.utime(path, (_MTIME_BASE + index, _MTIME_BASE + index))
            written.append(path)
            advance(1)
    assert first_ms is not None and last_ms is not None
    first = datetime.fromtimestamp(first_ms / 1000, tz=UTC)
    last = datetime.fromtimestamp(last_ms / 1000, tz=UTC)
    return GenerateResult(out, tuple(written), events, late, malformed, keys, first, last)
