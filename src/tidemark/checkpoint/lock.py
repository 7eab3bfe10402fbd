"""The run lock `tidemark run` keeps in <checkpoint>/_tidemark/run.lock, so prune never touches a live query."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from tidemark.checkpoint.fs import CheckpointFS, open_fs
from tidemark.checkpoint.layout import TIDEMARK_DIR
from tidemark.errors import CheckpointLocked

log = logging.getLogger(__name__)
LOCK_FILE = f"{TIDEMARK_DIR}/run.lock"
# A heartbeat older than this many intervals means the holder is gone.
STALE_AFTER_INTERVALS = 3


@dataclass(frozen=True)
class LockInfo:
    """Who holds a checkpoint: process, host, run, and when it last said it was alive."""

    pid: int
    host: str
    run_id: str
    started: datetime
    heartbeat: datetime
    heartbeat_seconds: float

    def to_json(self) -> str:
        """The lock file's content."""
        return json.dumps(
            {
                "pid": self.pid,
                "host": self.host,
                "run_id": self.run_id,
                "started": self.started.isoformat(),
                "heartbeat": self.heartbeat.isoformat(),
                "heartbeat_seconds": self.heartbeat_seconds,
            }
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LockInfo:
        """Read the lock file's JSON (times in UTC ISO format)."""

        def when(value: Any) -> datetime:
            parsed = datetime.fromisoformat(str(value))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)

        return cls(
            pid=int(data["pid"]),
            host=str(data["host"]),
            run_id=str(data["run_id"]),
            started=when(data["started"]),
            heartbeat=when(data["heartbeat"]),
            heartbeat_seconds=float(data.get("heartbeat_seconds", 10.0)),
        )


def _read(fs: CheckpointFS) -> LockInfo | None:
    data = fs.read_bytes(LOCK_FILE)
    if data is None:
        return None
    try:
        return LockInfo.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable lock file %s: %s", LOCK_FILE, exc)
        return None


def read_lock(checkpoint_location: str) -> LockInfo | None:
    """The lock of a checkpoint, or None when there is none (or it is unreadable)."""
    return _read(open_fs(checkpoint_location))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def lock_is_live(info: LockInfo, now: datetime | None = None) -> bool:
    """True when the heartbeat is younger than 3 intervals and, on this host, the process still exists."""
    now = now or datetime.now(tz=UTC)
    if now - info.heartbeat > timedelta(seconds=STALE_AFTER_INTERVALS * info.heartbeat_seconds):
        return False
    if info.host == socket.gethostname():
        return _pid_alive(info.pid)
    return True


def locked_message(checkpoint_location: str, info: LockInfo) -> str:
    """What to tell someone who finds the checkpoint locked."""
    return (
        f"checkpoint {checkpoint_location} is in use by run {info.run_id} (pid {info.pid} on {info.host}, "
        f"heartbeat {info.heartbeat.isoformat()}): stop that run first; if it is gone, the lock goes stale "
        f"{STALE_AFTER_INTERVALS * info.heartbeat_seconds:.0f}s after its last heartbeat, or delete {LOCK_FILE} "
        "inside the checkpoint"
    )


def ensure_unlocked(checkpoint_location: str, fs: CheckpointFS | None = None) -> None:
    """Raise CheckpointLocked when a live run holds the checkpoint."""
    info = _read(fs or open_fs(checkpoint_location))
    if info is not None and lock_is_live(info):
        raise CheckpointLocked(locked_message(checkpoint_location, info))


class RunLock:
    """Holds <checkpoint>/_tidemark/run.lock while a query runs, refreshing its heartbeat in a daemon thread."""

    def __init__(self, checkpoint_location: str, run_id: str, heartbeat_seconds: float = 10.0) -> None:
        self.checkpoint_location = checkpoint_location
        self.run_id = run_id
        self.heartbeat_seconds = heartbeat_seconds
        self._fs: CheckpointFS | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._info: LockInfo | None = None

    def _write(self, *, exclusive: bool) -> bool:
        assert self._fs is not None and self._info is not None
        return self._fs.write_atomic(LOCK_FILE, self._info.to_json().encode(), exclusive=exclusive)

    def __enter__(self) -> RunLock:
        """Take the lock (replacing a stale one) and start the heartbeat."""
        self._fs = open_fs(self.checkpoint_location)
        now = datetime.now(tz=UTC)
        self._info = LockInfo(os.getpid(), socket.gethostname(), self.run_id, now, now, self.heartbeat_seconds)
        if not self._write(exclusive=True):
            current = _read(self._fs)
            if current is not None and lock_is_live(current):
                raise CheckpointLocked(locked_message(self.checkpoint_location, current))
            log.warning("replacing a stale lock on %s (%s)", self.checkpoint_location, current)
            self._write(exclusive=False)
        self._thread = threading.Thread(target=self._beat, name="tidemark-run-lock", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            assert self._info is not None
            self._info = LockInfo(
                self._info.pid,
                self._info.host,
                self._info.run_id,
                self._info.started,
                datetime.now(tz=UTC),
                self._info.heartbeat_seconds,
            )
            try:
                self._write(exclusive=False)
            except OSError as exc:  # a transient storage error must not kill the run
                log.warning("cannot refresh the run lock heartbeat: %s", exc)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the heartbeat and remove the lock (only if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat_seconds + 5)
        if self._fs is not None:
            current = _read(self._fs)
            if current is None or (current.run_id == self.run_id and current.pid == os.getpid()):
                self._fs.delete(LOCK_FILE)
