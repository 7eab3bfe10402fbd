"""The run lock `tidemark run` keeps in <checkpoint>/_tidemark/run.lock, so prune never touches a live query."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol

from tidemark.compat import UTC
from tidemark.errors import CheckpointLocked
from tidemark.formats.layout import COMMITS, LOCK_FILE, OFFSETS
from tidemark.storage import Storage, open_storage
from tidemark.storage.objectstore import ObjectStore

log = logging.getLogger(__name__)
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


def _read(fs: Storage) -> LockInfo | None:
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
    return _read(open_storage(checkpoint_location))


def clear_lock(fs: Storage) -> None:
    """Remove the run lock from a checkpoint nobody runs (a private copy)."""
    fs.delete(LOCK_FILE)


def pid_alive(pid: int) -> bool:
    """True when a process of this id exists on this host."""
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
        return pid_alive(info.pid)
    return True


def locked_message(checkpoint_location: str, info: LockInfo) -> str:
    """What to tell someone who finds the checkpoint locked."""
    return (
        f"checkpoint {checkpoint_location} is in use by run {info.run_id} (pid {info.pid} on {info.host}, "
        f"heartbeat {info.heartbeat.isoformat()}): stop that run first; if it is gone, the lock goes stale "
        f"{STALE_AFTER_INTERVALS * info.heartbeat_seconds:.0f}s after its last heartbeat, or delete {LOCK_FILE} "
        "inside the checkpoint"
    )


def ensure_unlocked(checkpoint_location: str, fs: Storage | None = None) -> None:
    """Raise CheckpointLocked when a live run holds the checkpoint, or a query without tidemark's lock (a plain
    Spark job) planned a batch in the last MID_BATCH_LIVE and has not committed it."""
    store = fs or open_storage(checkpoint_location)
    info = _read(store)
    if info is not None and lock_is_live(info):
        raise CheckpointLocked(locked_message(checkpoint_location, info))
    if info is None:
        busy = _mid_batch(store)
        if busy is not None:
            msg = f"{checkpoint_location}: {busy}"
            raise CheckpointLocked(msg)


# A planned, uncommitted batch newer than this means a query may be running (one tidemark did not start).
MID_BATCH_LIVE = timedelta(minutes=10)


def _batch_ids(fs: Storage, folder: str) -> list[int]:
    listing = fs.list_dir(folder)
    return sorted(int(name) for name, _ in (listing.files if listing else []) if name.isdigit())


def _mid_batch(fs: Storage) -> str | None:
    planned = _batch_ids(fs, OFFSETS)
    if not planned:
        return None
    committed = _batch_ids(fs, COMMITS)
    if committed and committed[-1] >= planned[-1]:
        return None
    entry = fs.stat(f"{OFFSETS}/{planned[-1]}")
    if entry is None or entry.mtime is None:
        return None
    age = datetime.now(tz=UTC) - datetime.fromtimestamp(entry.mtime, tz=UTC)
    if age >= MID_BATCH_LIVE:
        return None
    return (
        f"batch {planned[-1]} was planned {age.total_seconds():.0f} s ago and has not committed: a query may be "
        f"running on this checkpoint (one not started by tidemark run). Stop it first; a crashed query's checkpoint "
        f"is accepted {MID_BATCH_LIVE.total_seconds() / 60:.0f} minutes after its last batch was planned"
    )


class _Holder(Protocol):
    """How a lock is held on one kind of store."""

    def acquire(self, data: bytes) -> bool: ...

    def beat(self, data: bytes) -> None: ...

    def release(self) -> None: ...


class _FileHolder:
    """Local disks and HDFS: an exclusive create (link / rename without overwrite), replaced when stale."""

    def __init__(self, fs: Storage) -> None:
        self._fs = fs

    def acquire(self, data: bytes) -> bool:
        if self._fs.write_atomic(LOCK_FILE, data, exclusive=True):
            return True
        current = _read(self._fs)
        if current is not None and lock_is_live(current):
            return False
        log.warning("replacing a stale lock (%s)", current)
        self._fs.write_atomic(LOCK_FILE, data)
        return True

    def beat(self, data: bytes) -> None:
        self._fs.write_atomic(LOCK_FILE, data)

    def release(self) -> None:
        self._fs.delete(LOCK_FILE)


class _ConditionalHolder:
    """S3: create with If-None-Match, steal a stale lock and beat with If-Match, so two writers cannot both win."""

    def __init__(self, fs: ObjectStore) -> None:
        self._fs = fs
        self._etag: str | None = None

    def _remember(self) -> None:
        entry = self._fs.stat(LOCK_FILE)
        self._etag = entry.etag if entry is not None else None

    def acquire(self, data: bytes) -> bool:
        if self._fs.write_atomic(LOCK_FILE, data, exclusive=True):
            self._remember()
            return True
        entry = self._fs.stat(LOCK_FILE)
        current = _read(self._fs)
        if current is not None and lock_is_live(current):
            return False
        if entry is None or entry.etag is None:
            return self.acquire(data) if entry is None else False
        log.warning("replacing a stale lock (%s)", current)
        if not self._fs.replace_if_match(LOCK_FILE, data, entry.etag):
            return False  # another run took it first
        self._remember()
        return True

    def beat(self, data: bytes) -> None:
        if self._etag is None or not self._fs.replace_if_match(LOCK_FILE, data, self._etag):
            log.error("the run lock %s was replaced by another writer", self._fs.uri(LOCK_FILE))
            return
        self._remember()

    def release(self) -> None:
        current = _read(self._fs)
        entry = self._fs.stat(LOCK_FILE)
        if entry is not None and entry.etag == self._etag and current is not None:
            self._fs.delete(LOCK_FILE)


class _LeaseHolder:
    """Azure: a blob lease; while it is held nobody else can write, delete or lease the lock blob."""

    def __init__(self, fs: Storage, lease: Any) -> None:
        self._fs = fs
        self._lease = lease

    def acquire(self, data: bytes) -> bool:
        if self._lease.acquire(data):
            return True
        # The lease of a holder known to be gone (its process died on this host, or its heartbeat stopped) is broken
        # at once rather than waited out: a killed run's restart would otherwise be refused for up to a minute. The
        # break holds only while the lock blob is as read, so of two restarts racing for it one wins.
        entry = self._fs.stat(LOCK_FILE)
        current = _read(self._fs)
        if current is None or lock_is_live(current):
            return False
        log.warning("breaking the lease of a stale lock (%s)", current)
        try:
            self._lease.break_dead(entry.etag if entry is not None else None)
        except Exception as exc:  # another run broke or took it first
            log.info("cannot break the stale lease: %s", exc)
            return False
        return bool(self._lease.acquire(data))

    def beat(self, data: bytes) -> None:
        self._lease.write(data)

    def release(self) -> None:
        self._lease.release()


def _holder(fs: Storage, heartbeat_seconds: float) -> _Holder:
    if isinstance(fs, ObjectStore):
        # A lease outlives a dead holder by at most its duration (15-60 s): a little over 3 heartbeats.
        lease = fs.lease(LOCK_FILE, int(min(60, max(15, STALE_AFTER_INTERVALS * heartbeat_seconds + 5))))
        if lease is not None:
            return _LeaseHolder(fs, lease)
        if fs.compare_and_swap:
            return _ConditionalHolder(fs)
    return _FileHolder(fs)


class RunLock:
    """Holds <checkpoint>/_tidemark/run.lock while a query runs, refreshing its heartbeat in a daemon thread."""

    def __init__(self, checkpoint_location: str, run_id: str, heartbeat_seconds: float = 10.0) -> None:
        self.checkpoint_location = checkpoint_location
        self.run_id = run_id
        self.heartbeat_seconds = heartbeat_seconds
        self._fs: Storage | None = None
        self._holder: _Holder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._info: LockInfo | None = None

    def _data(self) -> bytes:
        assert self._info is not None
        return self._info.to_json().encode()

    def __enter__(self) -> RunLock:
        """Take the lock (replacing a stale one) and start the heartbeat."""
        self._fs = open_storage(self.checkpoint_location)
        now = datetime.now(tz=UTC)
        self._info = LockInfo(os.getpid(), socket.gethostname(), self.run_id, now, now, self.heartbeat_seconds)
        self._holder = _holder(self._fs, self.heartbeat_seconds)
        if not self._holder.acquire(self._data()):
            current = _read(self._fs)
            if current is None:
                msg = f"checkpoint {self.checkpoint_location} is locked by another run (lease held); stop it first"
                raise CheckpointLocked(msg)
            raise CheckpointLocked(locked_message(self.checkpoint_location, current))
        self._thread = threading.Thread(target=self._beat, name="tidemark-run-lock", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            assert self._info is not None and self._holder is not None
            self._info = LockInfo(
                self._info.pid,
                self._info.host,
                self._info.run_id,
                self._info.started,
                datetime.now(tz=UTC),
                self._info.heartbeat_seconds,
            )
            try:
                self._holder.beat(self._data())
            except Exception as exc:  # a transient storage error must not kill the run
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
        if self._fs is not None and self._holder is not None:
            current = _read(self._fs)
            if current is None or (current.run_id == self.run_id and current.pid == os.getpid()):
                try:
                    self._holder.release()
                except Exception as exc:
                    log.warning("cannot remove the run lock: %s", exc)
