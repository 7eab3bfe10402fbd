"""Ctrl-C: exit 130, the one line "interrupted", no traceback, nothing half-written (docs/cli.md).

The signal goes to the whole process group, as a terminal's Ctrl-C does (the JVM pyspark starts ignores it; the
CLI cancels Spark's jobs). Each case waits for a sign that the command is in the middle of its work.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_ctrl_c_during_prune_apply_then_the_rerun_finishes_it_with_an_accurate_count(tmp_path: Path) -> None:
    from tests.fixtures.checkpoint import synthetic

    checkpoint = synthetic.simple(tmp_path / "checkpoint", batches=300, partitions=4, kind="snapshot")
    twin = tmp_path / "twin"
    shutil.copytree(checkpoint, twin)
    straight = subprocess.run(
        [TIDEMARK, "checkpoint", "prune", str(twin), "--keep", "2", "--apply", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    planned = json.loads(straight.stdout)["files"]
    journal = checkpoint / "_tidemark" / "journal"

    def deleting() -> bool:
        """The journal is written (atomically: complete once there) and its first file is gone."""
        written = list(journal.glob("journal-*.json")) if journal.is_dir() else []
        if not written:
            return False
        first = json.loads(written[0].read_text())["steps"][0][1]
        return not (checkpoint / first).exists()

    done = interrupt_when(
        ["checkpoint", "prune", str(checkpoint), "--keep", "2", "--apply"], deleting, tmp_path / "cache"
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted"]
    left = len(_files(checkpoint))
    assert left > len(_files(twin)), "the interrupt came after the prune ended"
    rerun = subprocess.run(
        [TIDEMARK, "checkpoint", "prune", str(checkpoint), "--keep", "2", "--apply"],
        capture_output=True,
        text=True,
        check=True,
    )
    first = rerun.stdout.splitlines()[0]
    assert first.startswith("finished an interrupted prune: removed the "), rerun.stdout
    counts = re.fullmatch(
        r"finished an interrupted prune: removed the ([\d,]+) file\(s\) it had left \(([\d,]+) were already gone\)",
        first,
    )
    assert counts is not None, first
    finished, gone = (int(c.replace(",", "")) for c in counts.groups())
    assert finished + gone == planned
    assert finished == left - len(_files(twin)) - 1  # the journal itself was the one more file
    assert rerun.stdout.splitlines()[1].startswith(
        f"nothing more to remove from {checkpoint}: keeping batches 298..299"
    )
    assert _files(checkpoint) == _files(twin)
    assert not (checkpoint / "_tidemark").exists() and not (twin / "_tidemark").exists()


def _marked(mark: str) -> list[int]:
    """The processes (the CLI's JVM, its Python workers) whose environment carries this test's mark."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if f"TIDEMARK_TEST_MARK={mark}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def _first_batch_committed(checkpoint: Path) -> Callable[[], bool]:
    return lambda: (checkpoint / "commits" / "0").is_file()


def _after(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


@pytest.mark.parametrize(
    ("command", "sig", "moment"),
    [
        ("state", signal.SIGINT, "jvm-starting"),  # before the gateway has written its connection file
        ("state", signal.SIGTERM, "spark-log"),  # the JVM is up and logging, the context being made
        ("run", signal.SIGINT, "spark-log"),
        ("run", signal.SIGTERM, "first-batch"),  # run's own graceful stop: exit 0 once the batch commits
    ],
)
def test_an_interrupt_at_any_moment_leaves_no_process_behind(
    tmp_path: Path, command: str, sig: signal.Signals, moment: str
) -> None:
    """Whenever tidemark is interrupted it exits with one line and leaves no JVM or Python worker it started
    (issue 37: Ctrl-C in the first seconds left the Spark JVM running with no parent)."""
    import uuid

    from tests.helpers import write_config
    from tidemark.pipeline.generate import generate_events

    cache = tmp_path / "cache"
    if command == "state":
        checkpoint = tmp_path / "checkpoint"
        shutil.copytree(FIXTURES / "spark35" / "hdfs_window", checkpoint)
        args = ["state", "stats", str(checkpoint)]
    else:
        generate_events(tmp_path / "landing", events=400, keys=6, files=4, seed=3)
        args = ["run", str(write_config(tmp_path, source={"max_files_per_trigger": 1})), "--available-now"]
    ready = {
        "jvm-starting": _after(1.5),
        "spark-log": spark_started(cache),
        "first-batch": _first_batch_committed(tmp_path / "checkpoint"),
    }[moment]
    mark = uuid.uuid4().hex
    env = {**os.environ, "TIDEMARK_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1", "TIDEMARK_TEST_MARK": mark}
    proc = subprocess.Popen(
        [TIDEMARK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not ready():
            assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
            assert time.monotonic() < deadline, "the command never reached the point to interrupt"
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        expected = 0 if (command, sig) == ("run", signal.SIGTERM) else (130 if sig == signal.SIGINT else 143)
        assert proc.returncode == expected, err
        if expected:
            assert err.strip().splitlines()[-1] == "interrupted", err
        assert "Traceback" not in err
        left = _marked(mark)
        settle = time.monotonic() + 20  # a JVM told to stop runs Spark's shutdown hooks first
        while left and time.monotonic() < settle:
            time.sleep(0.25)
            left = _marked(mark)
        assert left == [], f"left running after the command exited: {left}"
    finally:
        for pid in _marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
