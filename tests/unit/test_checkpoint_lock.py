"""The run lock: written atomically, refreshed, refused while live, removed on exit."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tidemark.compat import UTC
from tidemark.errors import CheckpointLocked
from tidemark.formats import LOCK_FILE, RunLock, lock_is_live, read_lock


def test_lock_lifecycle(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ck")
    with RunLock(ckpt, "run-1", heartbeat_seconds=0.2) as held:
        info = read_lock(ckpt)
        assert info is not None and info.run_id == "run-1"
        assert info.heartbeat.tzinfo is not None
        assert lock_is_live(info)
        with pytest.raises(CheckpointLocked, match="run-1") as caught, RunLock(ckpt, "run-2"):
            pass
        assert f"pid {info.pid}" in str(caught.value) and LOCK_FILE in str(caught.value)
        time.sleep(0.7)
        refreshed = read_lock(ckpt)
        assert refreshed is not None and refreshed.heartbeat > info.heartbeat
        assert held.run_id == "run-1"
    assert read_lock(ckpt) is None
    assert not (tmp_path / "ck" / LOCK_FILE).exists()


def test_stale_lock_is_replaced(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ck")
    with RunLock(ckpt, "old", heartbeat_seconds=1):
        pass
    with RunLock(ckpt, "old", heartbeat_seconds=60):
        info = read_lock(ckpt)
        assert info is not None
        # Freeze a copy in the past and write it as if a crashed run had left it.
        stale = replace(info, run_id="crashed", heartbeat=info.heartbeat - timedelta(hours=1))
    (tmp_path / "ck" / LOCK_FILE).write_text(stale.to_json())
    assert not lock_is_live(stale)
    with RunLock(ckpt, "new"):
        current = read_lock(ckpt)
        assert current is not None and current.run_id == "new"


def test_liveness_rules() -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    from tidemark.formats import LockInfo

    remote = LockInfo(1, "some-other-host", "r", now, now - timedelta(seconds=25), 10.0)
    assert lock_is_live(remote, now=now)
    assert not lock_is_live(remote, now=now + timedelta(seconds=10))
    import socket

    dead = LockInfo(2**22 + 12345, socket.gethostname(), "r", now, now, 10.0)
    assert not lock_is_live(dead, now=now)
