"""Ctrl-C: exit 130, the one line "interrupted", no traceback, nothing half-written (docs/cli.md).

The signal goes to the whole process group, as a terminal's Ctrl-C does (the JVM pyspark starts ignores it; the
CLI cancels Spark's jobs). Each case waits for a sign that the command is in the middle of its work.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TIDEMARK = str(Path(sys.executable).with_name("tidemark"))


def interrupt_when(
    args: list[str], ready: Callable[[], bool], cache: Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process group; SIGINT the group once ready() holds; wait for the exit."""
    env = {**os.environ, "TIDEMARK_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [TIDEMARK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
            assert time.monotonic() < deadline, "the command never reached the point to interrupt"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        started = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - started
        assert took < 30, f"took {took:.0f} s to stop after Ctrl-C"
        # A JVM still starting when Ctrl-C came ends on its own; the test does not wait for it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def spark_started(cache: Path) -> Callable[[], bool]:
    """True once the command's JVM has written its first log lines (Spark is starting or reading)."""

    def check() -> bool:
        return any("log level" in p.read_text(errors="replace") for p in (cache / "logs").glob("spark-*.log"))

    return check


def test_ctrl_c_while_reading_state_is_one_line_and_exit_130(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(FIXTURES / "spark35" / "hdfs_window", checkpoint)
    cache = tmp_path / "cache"
    done = interrupt_when(["state", "stats", str(checkpoint)], spark_started(cache), cache)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted"]
    assert done.stdout == ""
