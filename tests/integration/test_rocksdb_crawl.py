"""A crawl seen coming: a tiny RocksDB cap on small, growing state warns, names the cap, before any batch hangs.

The pipeline runs in its own process (tests/integration/crawl_child.py): RocksDB's memory manager is one per JVM
and the first cap set wins, so the shared test session cannot carry a cap of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidemark.formats import read_progress_log
from tidemark.monitor.analyze import analyze
from tidemark.monitor.rocksdb_health import CRAWL_CODE, MISS_SHARE_HIGH, MISS_SHARE_RISING

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CHILD = Path(__file__).with_name("crawl_child.py")
MIB = 1024**2
# The watch skips a run's first batch and needs 3 more to see a rise, so it can fire at batch 3 the earliest; on a
# busy machine the miss shares wobble and it may take up to four batches more (seen in CI at batch 4, at batch 5
# with the window 3-5, and at batch 7 with the window 5-7, the last of eight). Ten batches leave room after it to
# show that the warning came while batches still completed.
BATCHES = 10


def test_a_tiny_cap_on_growing_state_warns_with_the_cap_to_set(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path), "40000", str(BATCHES), "16"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["batches"] == BATCHES

    events = read_progress_log(result["log"])
    started_line = next(e for e in events if e.type == "started")
    assert started_line.data["state_store"]["rocksdb"]["cap_bytes"] == 16 * MIB
    assert started_line.data["state_store"]["rocksdb"]["chosen"] == "config"
    progress = [e for e in events if e.progress is not None]
    assert {e.rocksdb_cap_bytes for e in progress} == {16 * MIB}  # memory against the cap, on every batch

    [warning] = [e for e in events if e.type == "warning" and e.data.get("code") == CRAWL_CODE]
    # Rising over the watch's window, or already high when the window filled (the first batches' misses vary with
    # the machine's load: seen in CI, 0.61 at batch 2): either way the share named is past its threshold.
    trend = re.search(
        r"miss the block cache (?:rose from [\d.]+ to ([\d.]+)|is ([\d.]+) at batch)", warning.data["message"]
    )
    assert trend is not None, warning.data["message"]
    assert float(trend.group(1)) >= MISS_SHARE_RISING if trend.group(1) else float(trend.group(2)) >= MISS_SHARE_HIGH
    assert "of its 16 MB cap" in warning.data["message"]
    suggested = int(re.search(r"bounded_memory_mb = (\d+)", warning.data["fix"]).group(1))  # type: ignore[union-attr]
    assert suggested >= 32  # at least twice the cap that crawls
    # It came while batches still completed: before the last batch, and no watchdog line.
    warned_after = max(e.progress.batch_id for e in progress if e.time <= warning.time)  # type: ignore[union-attr]
    assert warned_after < max(e.progress.batch_id for e in progress), warning.data["message"]  # type: ignore[union-attr]
    assert not any(e.type == "stuck" for e in events)
    assert any(text.startswith(CRAWL_CODE) for text in result["warnings"])  # the run's own output says so too

    # The same finding, from the log alone.
    [run] = analyze(result["log"]).runs
    assert CRAWL_CODE in [f.code for f in run.findings]
    assert run.rocksdb is not None and run.rocksdb.cap_bytes == 16 * MIB
    print(f"crawl test: {time.monotonic() - started:.1f} s")
