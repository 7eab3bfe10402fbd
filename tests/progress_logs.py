"""Synthetic long progress logs (hundreds of thousands of batches), written fast from one recorded batch.

Each progress line is a recorded Spark progress JSON with its per-batch figures replaced: batch id and
timestamps advance by a 2-second trigger, durations, rows and commit times vary deterministically, state
grows and is evicted in a saw-tooth (a bounded query), and one batch can be made a spike. Lines are
produced by %-formatting one template string, about 2 us a line, so a 300,000-batch log takes a second or two.
Used by the report test and by benchmarks/long_log.py.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidemark.compat import UTC

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "progress"
START = datetime(2026, 1, 1, tzinfo=UTC)
TRIGGER_SECONDS = 2
# Phases other than addBatch, in ms; addBatch takes the rest of the batch.
FIXED_PHASES = {"latestOffset": 4, "getBatch": 1, "queryPlanning": 35, "walCommit": 48, "commitOffsets": 41}
BASE_DURATION_MS = 1500

# Lean: only what tidemark reads, about 800 bytes a line (for tests).
LEAN_PROGRESS: dict[str, Any] = {
    "id": "query-1",
    "runId": "spark-run-1",
    "name": "long_run",
    "timestamp": "",
    "batchId": 0,
    "batchDuration": 0,
    "numInputRows": 0,
    "inputRowsPerSecond": 0.0,
    "processedRowsPerSecond": 0.0,
    "durationMs": {**FIXED_PHASES, "addBatch": 0, "triggerExecution": 0},
    "eventTime": {"max": "", "watermark": ""},
    "stateOperators": [
        {
            "operatorName": "stateStoreSave",
            "numRowsTotal": 0,
            "numRowsUpdated": 0,
            "numRowsRemoved": 0,
            "commitTimeMs": 0,
            "memoryUsedBytes": 0,
            "numRowsDroppedByWatermark": 0,
            "numShufflePartitions": 2,
            "numStateStoreInstances": 2,
        }
    ],
    "observedMetrics": {"tidemark_quarantine": {"count": 0, "rows": []}},
}


def recorded_progress() -> dict[str, Any]:
    """A real RocksDB + changelog batch (custom metrics, sources, sink), with an event-time watermark added."""
    lines = (FIXTURES / "growing_rocksdb.jsonl").read_text().splitlines()
    progress: dict[str, Any] = json.loads(next(line for line in lines if '"type":"progress"' in line))["progress"]
    progress["name"] = "long_run"
    progress["eventTime"] = {"avg": "", "max": "", "min": "", "watermark": ""}
    return progress


@dataclass(frozen=True)
class SyntheticLog:
    """What was written, for the tests' and the benchmark's own expectations."""

    path: Path
    run_id: str
    batches: int
    spike_batch: int | None
    normal_max_duration_ms: int
    spike_duration_ms: int | None
    size_bytes: int


def duration_ms(batch: int) -> int:
    """The batch duration of a normal batch: 1.5 to 2.1 s, deterministic noise."""
    return BASE_DURATION_MS + (batch * 7919) % 601


def _format(progress: Mapping[str, Any], run_id: str) -> str:
    """The progress line as a %-format string: variable fields become %(name)s / %(name)d."""
    p = copy.deepcopy(dict(progress))
    numbers = {
        "batchId": "batch",
        "batchDuration": "duration",
        "numInputRows": "rows",
        "inputRowsPerSecond": "in_rate",
        "processedRowsPerSecond": "out_rate",
    }
    for key, name in numbers.items():
        p[key] = f"@@{name}@@"
    p["timestamp"] = "##start##"
    p["durationMs"] = {**p.get("durationMs", {}), **FIXED_PHASES}
    p["durationMs"]["addBatch"] = "@@add@@"
    p["durationMs"]["triggerExecution"] = "@@duration@@"
    p["eventTime"] = {key: "##start##" for key in p.get("eventTime", {})}
    p["eventTime"]["max"] = "##event_max##"
    p["eventTime"]["watermark"] = "##watermark##"
    op = p["stateOperators"][0]
    for key, name in {
        "numRowsTotal": "state_rows",
        "numRowsUpdated": "rows",
        "numRowsRemoved": "removed",
        "commitTimeMs": "commit",
        "memoryUsedBytes": "memory",
        "numRowsDroppedByWatermark": "dropped",
    }.items():
        op[key] = f"@@{name}@@"
    for source in p.get("sources", ()):
        source["numInputRows"] = "@@rows@@"
    if "sink" in p:
        p["sink"]["numOutputRows"] = "@@rows@@"
    p["observedMetrics"] = {"tidemark_quarantine": {"count": "@@quarantined@@", "rows": []}}
    line = {"type": "progress", "time": "##time##", "run_id": run_id, "progress": p}
    text = json.dumps(line, separators=(",", ":")).replace("%", "%%")
    for name in ("batch", "duration", "rows", "add", "state_rows", "removed", "commit", "memory", "dropped"):
        text = text.replace(f'"@@{name}@@"', f"%({name})d")
    text = text.replace('"@@quarantined@@"', "%(quarantined)d")
    for name in ("in_rate", "out_rate"):
        text = text.replace(f'"@@{name}@@"', f"%({name}).1f")
    for name in ("time", "start", "event_max", "watermark"):
        text = text.replace(f"##{name}##", f"%({name})s")
    return text + "\n"


@functools.lru_cache(maxsize=64)
def _day(day: int) -> str:
    return (START + timedelta(days=day)).strftime("%Y-%m-%d")


def _stamp_ms(ms: int) -> str:
    """START + ms as Spark writes it; integer arithmetic, 5x faster than strftime on every line."""
    seconds, milli = divmod(ms, 1000)
    day, rest = divmod(seconds, 86400)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return f"{_day(day)}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}Z"


def write_long_log(
    path: Path,
    batches: int,
    spike_batch: int | None = None,
    spike_factor: int = 10,
    progress: Mapping[str, Any] | None = None,
    run_id: str = "long-run",
) -> SyntheticLog:
    """Write a one-run log of `batches` progress lines (plus started/terminated); one batch may be a spike."""
    template = _format(progress if progress is not None else LEAN_PROGRESS, run_id)
    fixed = sum(FIXED_PHASES.values())
    state_rows = 10_000
    normal_max = 0
    spike_ms = None
    with path.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "started", "time": _stamp_ms(0), "run_id": run_id, "name": "long_run"}) + "\n")
        chunk: list[str] = []
        for batch in range(batches):
            start = batch * TRIGGER_SECONDS * 1000
            duration = duration_ms(batch)
            if batch == spike_batch:
                duration *= spike_factor
                spike_ms = duration
            else:
                normal_max = max(normal_max, duration)
            rows = 2000 + (batch * 31) % 500
            # State grows by the new keys and is evicted every 100th batch: a bounded, saw-tooth state.
            removed = state_rows - 10_000 if batch % 100 == 99 else 0
            state_rows += rows // 10 - removed
            start_text = _stamp_ms(start)
            chunk.append(
                template
                % {
                    "batch": batch,
                    "duration": duration,
                    "rows": rows,
                    "in_rate": rows / TRIGGER_SECONDS,
                    "out_rate": rows * 1000 / duration,
                    "add": duration - fixed,
                    "state_rows": state_rows,
                    "removed": removed,
                    "commit": 90 + (batch * 13) % 60,
                    "memory": state_rows * 180,
                    "dropped": 1 if batch % 997 == 0 else 0,
                    "quarantined": 1 if batch % 1009 == 0 else 0,
                    "time": _stamp_ms(start + duration + 3),
                    "start": start_text,
                    "event_max": _stamp_ms(start - 30_000),
                    "watermark": _stamp_ms(start - 600_000),
                }
            )
            if len(chunk) == 4096:
                handle.write("".join(chunk))
                chunk.clear()
        handle.write("".join(chunk))
        end = _stamp_ms(batches * TRIGGER_SECONDS * 1000)
        handle.write(json.dumps({"type": "terminated", "time": end, "run_id": run_id, "exception": None}) + "\n")
    return SyntheticLog(path, run_id, batches, spike_batch, normal_max, spike_ms, path.stat().st_size)
