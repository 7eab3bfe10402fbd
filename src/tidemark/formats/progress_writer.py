"""Writing the durable progress log: append-only JSON lines, on a local disk or an object store.

Locally each line is one unbuffered O_APPEND write, fsynced before the next. Object stores cannot append:
there the log is a series of part files `<run_id>.<part>.jsonl`, and each line rewrites the current part
(one PUT of at most PART_BYTES), so a crash loses nothing written before it; the reader joins the parts.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from tidemark.compat import UTC
from tidemark.errors import EnvironmentProblem, TidemarkError
from tidemark.formats.progress_log import LOG_SUFFIX
from tidemark.secrets import redact
from tidemark.storage import Storage, open_storage, parse_location

# A part rolls over at this size: each PUT then stays small whatever the length of the run.
PART_BYTES = 256 * 1024


def utc_now_text(moment: datetime | None = None) -> str:
    """A UTC ISO-8601 timestamp with millisecond precision and a trailing Z, as Spark writes them."""
    value = (moment or datetime.now(UTC)).astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def log_path_for(monitor_dir: str | Path, run_id: str) -> str:
    """Where one run's log goes: the file `<run_id>.jsonl` locally, the folder of its parts on object stores."""
    location = parse_location(str(monitor_dir))
    if location.is_local:
        return os.path.join(location.key, f"{run_id}{LOG_SUFFIX}")
    return location.uri


class _Sink:
    """Where lines go: a local file, or rewritten parts on an object store."""

    def write(self, line: bytes) -> None: ...

    def close(self) -> None: ...


class _LocalSink(_Sink):
    def __init__(self, path: str, fsync: bool) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync

    def write(self, line: bytes) -> None:
        assert self._fd is not None
        # One unbuffered O_APPEND write per line: a crash leaves at most a torn last line, which the reader skips.
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _PartSink(_Sink):
    def __init__(self, store: Storage, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._part = 0
        self._buffer = bytearray()

    def write(self, line: bytes) -> None:
        if self._buffer and len(self._buffer) + len(line) > PART_BYTES:
            self._part += 1
            self._buffer = bytearray()
        self._buffer += line
        self._store.write_atomic(f"{self._run_id}.{self._part:06d}{LOG_SUFFIX}", bytes(self._buffer))

    def close(self) -> None:
        self._buffer = bytearray()


class ProgressLogWriter:
    """Appends one JSON object per line to a run's log; thread-safe, durable per line."""

    def __init__(self, path: str | Path, run_id: str, fsync: bool = True) -> None:
        self.path = str(path)
        self.run_id = run_id
        self._fsync = fsync
        self._lock = threading.Lock()
        self._sink: _Sink | None = None
        self.lines_written = 0

    def open(self) -> None:
        """Create the folder and open the log (an existing log is continued, never truncated)."""
        with self._lock:
            if self._sink is not None:
                return
            location = parse_location(self.path)
            try:
                if location.is_local:
                    self._sink = _LocalSink(location.key, self._fsync)
                else:
                    self._sink = _PartSink(open_storage(location), self.run_id)
            except OSError as exc:
                msg = (
                    f"cannot write the progress log {self.path}: {exc.strerror} "
                    "(set [monitor] dir to a writable folder)"
                )
                raise EnvironmentProblem(msg) from exc
            except TidemarkError as exc:
                msg = f"cannot write the progress log {self.path}: {exc} (set [monitor] dir to a writable folder)"
                raise EnvironmentProblem(msg) from exc

    def write(self, type: str, time: datetime | None = None, **data: Any) -> dict[str, Any]:
        """Append one line {"type", "time", "run_id", **data} and make it durable; returns the written object."""
        record: dict[str, Any] = {"type": type, "time": utc_now_text(time), "run_id": self.run_id}
        record.update(data)
        # A secret read at run time (a Kafka connection string) never reaches the log, whatever a message quotes.
        line = (redact(json.dumps(record, separators=(",", ":"), default=str)) + "\n").encode("utf-8")
        with self._lock:
            if self._sink is None:
                msg = f"progress log {self.path} is not open"
                raise EnvironmentProblem(msg)
            self._sink.write(line)
            self.lines_written += 1
        return record

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        with self._lock:
            if self._sink is not None:
                self._sink.close()
                self._sink = None
