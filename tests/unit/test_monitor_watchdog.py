"""The watchdog's timing rules and the diagnosis helpers, without Spark."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from tidemark.monitor.watchdog import (
    StuckDiagnosis,
    Watchdog,
    checkpoint_file_counts,
    default_stuck_after,
    latest_planned_batch,
)


def test_default_stuck_after_is_ten_triggers_but_at_least_five_minutes() -> None:
    assert default_stuck_after(timedelta(seconds=10)) == timedelta(minutes=5)
    assert default_stuck_after(timedelta(minutes=2)) == timedelta(minutes=20)
    assert default_stuck_after(timedelta(minutes=2), timedelta(seconds=3)) == timedelta(seconds=3)


def test_fires_once_per_episode_and_rearms_on_activity() -> None:
    fired: list[float] = []
    dog = Watchdog(timedelta(seconds=0.3), fired.append, check_every=0.05)
    dog.start()
    try:
        time.sleep(1.0)
        assert len(fired) == 1 and fired[0] >= 0.3
        dog.note_activity()
        time.sleep(0.1)
        assert len(fired) == 1  # activity restarted the clock
        time.sleep(0.6)
        assert len(fired) == 2
    finally:
        dog.stop()


def test_does_not_fire_while_the_query_is_not_busy() -> None:
    fired: list[float] = []
    busy = {"now": False}
    dog = Watchdog(timedelta(seconds=0.1), fired.append, is_busy=lambda: busy["now"])
    time.sleep(0.2)
    assert not dog.check()
    busy["now"] = True
    assert dog.check()
    assert len(fired) == 1


def test_checkpoint_counts_and_planned_batch(tmp_path: Path) -> None:
    for name in ("0", "1", "2", ".2.crc"):
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "offsets" / name).write_text("v1")
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1")
    (tmp_path / "state" / "0" / "1").mkdir(parents=True)
    (tmp_path / "state" / "0" / "1" / "1.delta").write_text("")
    assert checkpoint_file_counts(str(tmp_path)) == {"offsets": 3, "commits": 1, "sources": 0, "state": 1}
    assert latest_planned_batch(f"file://{tmp_path}") == 2
    assert checkpoint_file_counts("s3a://bucket/ckpt") == {}


def test_diagnosis_message_names_the_batch_and_stages() -> None:
    diagnosis = StuckDiagnosis(
        batch_id=7, last_completed_batch=6, waiting_seconds=31, stuck_after_seconds=30, action="stop"
    )
    text = diagnosis.message()
    assert "batch 7" in text and "no Spark stage is running" in text and "being stopped" in text
