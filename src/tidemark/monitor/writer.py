"""Writing the durable progress log: append-only JSON lines, each flushed and fsynced before the next."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidemark.errors import EnvironmentProblem
from tidemark.monitor.log import LOG_SUFFIX


def utc_now_text(moment: datetime | None = None) -> str:
    """A UTC ISO-8601 timestamp with millisecond precision and a trailing Z, as Spark writes them."""
    value = (moment or datetime.now(UTC)).astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def log_path_for(monitor_dir: str | Path, run_id: str) -> Path:
    """The log file of one run inside the monitor folder."""
    return Path(monitor_dir) / f"{run_id}{LOG_SUFFIX}"


class ProgressLogWriter:
    """Appends one JSON object per line to a run's log; thread-safe, durable per line."""

    def __init__(self, path: str | Path, run_id: str, fsync: bool = True) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self._fsync = fsync
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.lines_written = 0

    def open(self) -> None:
        """Create the folder and open the file for appending (an existing log is continued, never truncated)."""
        with self._lock:
            if self._fd is not None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                msg = (
                    f"cannot write the progress log {self.path}: {exc.strerror} "
                    "(set [monitor] dir to a writable folder)"
                )
                raise EnvironmentProblem(msg) from exc

    def write(self, type: str, time: datetime | None = None, **data: Any) -> dict[str, Any]:
        """Append one line {"type", "time", "run_id", **data} and make it durable; returns the written object."""
        record: dict[str, Any] = {"type": type, "time": utc_now_text(time), "run_id": self.run_id}
        record.update(data)
        # One unbuffered O_APPEND write per line: a crash leaves at most a torn last line, which the reader skips.
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                msg = f"progress log {self.path} is not open"
                raise EnvironmentProblem(msg)
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            if self._fsync:
                os.fsync(self._fd)
            self.lines_written += 1
        return record

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
