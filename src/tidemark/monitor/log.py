"""Reading the durable progress log: one JSON object per line, a torn last line skipped."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from tidemark.errors import UsageError
from tidemark.monitor.progress import BatchProgress, parse_spark_time

log = logging.getLogger(__name__)

LOG_SUFFIX = ".jsonl"


class EventType(StrEnum):
    """The kinds of line the progress log holds."""

    STARTED = "started"
    PROGRESS = "progress"
    IDLE = "idle"
    STUCK = "stuck"
    TERMINATED = "terminated"
    WARNING = "warning"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class LogEvent:
    """One line of the progress log."""

    type: str
    time: datetime
    run_id: str | None
    data: Mapping[str, Any]

    @property
    def progress(self) -> BatchProgress | None:
        """The batch progress carried by a `progress` line."""
        raw = self.data.get("progress")
        return BatchProgress.from_json(raw) if self.type == EventType.PROGRESS and isinstance(raw, dict) else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogEvent:
        """Build from one parsed log line."""
        time = parse_spark_time(str(data.get("time", ""))) or datetime.fromtimestamp(0, tz=UTC)
        run_id = data.get("run_id")
        return cls(type=str(data.get("type", "")), time=time, run_id=str(run_id) if run_id else None, data=data)


def log_files(path: str | Path) -> list[Path]:
    """The log files at path: the file itself, or every *.jsonl in a folder, oldest name first."""
    target = Path(path)
    if target.is_dir():
        return sorted(p for p in target.iterdir() if p.suffix == LOG_SUFFIX)
    if target.is_file():
        return [target]
    msg = f"progress log {target} does not exist (it is written by 'tidemark run' under [monitor] dir)"
    raise UsageError(msg)


def _iter_file(file: Path) -> Iterator[LogEvent]:
    with file.open("r", encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            # A crash mid-write leaves at most one torn line, the last; anything else is worth a warning.
            if number != len(lines):
                log.warning("skipping unreadable line %d of %s", number, file)
            continue
        if isinstance(data, dict):
            yield LogEvent.from_json(data)


def read_log(path: str | Path) -> list[LogEvent]:
    """Every event of a progress log file or folder, in file then line order."""
    return [event for file in log_files(path) for event in _iter_file(file)]


def read_progress(path: str | Path) -> list[BatchProgress]:
    """Only the batch progress records of a log, in order."""
    return [p for p in (event.progress for event in read_log(path)) if p is not None]
