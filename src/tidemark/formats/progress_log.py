"""Reading the durable progress log: one JSON object per line, a torn last line skipped.

Every listing and opening of log files goes through log_files() and log_lines(), so the log can move to
another storage by changing those two.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from tidemark.compat import UTC, StrEnum
from tidemark.errors import InputError
from tidemark.formats.progress import BatchProgress, parse_spark_time
from tidemark.steps import step
from tidemark.storage import open_storage, parse_location

log = logging.getLogger(__name__)

LOG_SUFFIX = ".jsonl"
# A progress line's RocksDB memory cap (bytes) of the process that ran the batch, written beside Spark's progress.
ROCKSDB_CAP_FIELD = "rocksdb_cap_bytes"
MAX_LINE_BYTES = 16 * 1024**2


class EventType(StrEnum):
    """The kinds of line the progress log holds."""

    STARTED = "started"
    PROGRESS = "progress"
    IDLE = "idle"
    STUCK = "stuck"
    TERMINATED = "terminated"
    WARNING = "warning"
    QUARANTINE = "quarantine"
    DATA_LOSS = "data-loss"  # offsets a Kafka source needed were gone (fail_on_data_loss = false)


@dataclass(frozen=True)
class LogEvent:
    """One line of the progress log."""

    type: str
    time: datetime
    run_id: str | None
    data: Mapping[str, Any]

    @property
    def rocksdb_cap_bytes(self) -> int | None:
        """The RocksDB memory cap a progress line records (None: not recorded, or not RocksDB)."""
        value = self.data.get(ROCKSDB_CAP_FIELD)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None

    @property
    def progress(self) -> BatchProgress | None:
        """The batch progress carried by a `progress` line."""
        raw = self.data.get("progress")
        return BatchProgress.from_json(raw) if self.type == EventType.PROGRESS and isinstance(raw, dict) else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogEvent:
        """Build from one parsed log line."""
        try:
            time = parse_spark_time(str(data.get("time", ""))) or datetime.fromtimestamp(0, tz=UTC)
        except ValueError:  # a damaged or foreign line: its time is unknown, never a crash
            time = datetime.fromtimestamp(0, tz=UTC)
        run_id = data.get("run_id")
        return cls(type=str(data.get("type", "")), time=time, run_id=str(run_id) if run_id else None, data=data)


def _name_order(name: str) -> tuple[str | int, ...]:
    # Numbers compare as numbers, so part files <run_id>.2.jsonl sort before <run_id>.10.jsonl.
    return tuple(int(part) if index % 2 else part for index, part in enumerate(re.split(r"(\d+)", name)))


def log_files(path: str | Path) -> list[str]:
    """The log files at a path or URI: the file itself, or every *.jsonl in a folder, in name order.

    A run's log may come as several part files (`<run_id>.<part>.jsonl`, as object stores get it); the
    reader takes them in name order (numbers compared as numbers) and groups events by the run id each
    line carries, never by file.
    """
    location = parse_location(str(path))
    missing = f"progress log {location.uri} does not exist (it is written by 'tidemark run' under [monitor] dir)"
    if location.is_local:
        target = Path(location.key)
        if target.is_dir():
            names = [p.name for p in target.iterdir() if p.suffix == LOG_SUFFIX and p.is_file()]
            return [str(target / n) for n in sorted(names, key=_name_order)]
        if target.is_file():
            return [str(target)]
        raise InputError(missing)
    parent = open_storage(location.parent)
    if parent.stat(location.name) is not None:
        return [location.uri]
    store = open_storage(location)
    listing = store.list_dir("")
    if listing is None:
        raise InputError(missing)
    names = [n for n, _ in listing.files if n.endswith(LOG_SUFFIX)]
    return [store.uri(n) for n in sorted(names, key=_name_order)]


_RECORD_TYPES = frozenset(e.value for e in EventType)


def is_record(event: LogEvent) -> bool:
    """True for a line tidemark's progress log writes (any other JSON object is foreign)."""
    return event.type in _RECORD_TYPES


def no_records(path: str | Path) -> InputError:
    """The one-line error for a log location that holds no progress record: no log file, or none with a record."""
    files = log_files(path)
    if not files:
        msg = (
            f"{path} holds no progress log (no *{LOG_SUFFIX} file): pass a <run_id>{LOG_SUFFIX} file or the "
            "[monitor] dir 'tidemark run' writes"
        )
    else:
        msg = f"{path} holds no tidemark progress record ({len(files)} file(s) read): is it a progress log?"
    return InputError(msg)


def log_lines(file: str) -> Iterator[str]:
    """The lines of one log file, read as needed; a torn UTF-8 character becomes U+FFFD, and a line longer than
    MAX_LINE_BYTES (no progress line comes near it) is skipped rather than read into memory."""
    location = parse_location(file)
    store = open_storage(location.parent)
    with store.open_read(location.name) as handle:
        while True:
            chunk = handle.readline(MAX_LINE_BYTES)
            if not chunk:
                return
            if len(chunk) == MAX_LINE_BYTES and not chunk.endswith(b"\n"):
                log.warning("skipping a line of more than %d bytes in %s", MAX_LINE_BYTES, file)
                while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass
                yield "\x00"  # counted as an unreadable line
                continue
            yield chunk.decode("utf-8", errors="replace")


def _parse(line: str) -> Any:
    """One line's JSON (None if unreadable): orjson, 3x faster on progress lines; the standard library for what
    it rejects and Python wrote (NaN, integers beyond 64 bits)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _file_events(file: str) -> Iterator[LogEvent]:
    unreadable: int | None = None
    for number, line in enumerate(log_lines(file), start=1):
        if line.isspace():
            continue
        if unreadable is not None:
            # A crash mid-write leaves at most one torn line, the last; anything else is worth a warning.
            log.warning("skipping unreadable line %d of %s", unreadable, file)
            unreadable = None
        data = _parse(line)
        if data is None:
            unreadable = number
        elif isinstance(data, dict):
            yield LogEvent.from_json(data)


def iter_log(path: str | Path) -> Iterator[LogEvent]:
    """Every event of a progress log file or folder, in file then line order, one at a time (bounded memory)."""
    files = log_files(path)
    with step(f"reading the progress log {path}: files", total=len(files)) as advance:
        for file in files:
            yield from _file_events(file)
            advance(1)


def iter_progress(path: str | Path) -> Iterator[BatchProgress]:
    """Only the batch progress records of a log, in order, one at a time."""
    for event in iter_log(path):
        progress = event.progress
        if progress is not None:
            yield progress


TAIL_BYTES = 4 * 1024**2


def _tail_lines(file: str) -> list[str]:
    """The complete lines among the last TAIL_BYTES of one log file (all of a short one)."""
    location = parse_location(file)
    store = open_storage(location.parent)
    with store.open_read(location.name) as handle:
        try:
            size = handle.seek(0, 2)
            start = max(0, size - TAIL_BYTES)
            handle.seek(start)
        except (OSError, ValueError):  # not seekable: read it all
            start = 0
        data = handle.read()
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if start > 0 else lines


def last_progress(path: str | Path) -> LogEvent | None:
    """The newest progress line of a log file or folder (its last files' tails only), None when there is none.

    A folder that does not exist yet (no run wrote it) has none.
    """
    try:
        files = log_files(path)
    except InputError:
        return None
    for file in reversed(files):
        for line in reversed(_tail_lines(file)):
            data = _parse(line) if line.strip() else None
            if isinstance(data, dict) and data.get("type") == EventType.PROGRESS:
                event = LogEvent.from_json(data)
                if event.progress is not None:
                    return event
    return None


def read_log(path: str | Path) -> list[LogEvent]:
    """Every event of a progress log file or folder, in a list (for short logs; long ones: iter_log)."""
    return list(iter_log(path))


def read_progress(path: str | Path) -> list[BatchProgress]:
    """Only the batch progress records of a log, in a list (for short logs; long ones: iter_progress)."""
    return list(iter_progress(path))
