"""Every command that can take over 2 seconds shows progress on a terminal (issue 37): one test walks them all.

The commands are enumerated from the app (as tests/unit/test_cli_exit_codes.py does): each is either walked here,
run in its own process with its stderr on a pseudo-terminal (what a user's shell gives it), or named in FAST with
why it cannot take 2 seconds; a command added later fails this test until it is one or the other. A walked
command must exit as it would in a pipe and draw one of its progress steps on the terminal (the step's
description, read off the terminal's bytes). The steps are where the time goes: starting Spark, listing a
checkpoint, reading state stores, reading a progress log, a download, waiting for workers.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import kafka_source, write_config
from tests.unit.test_cli_exit_codes import LEAVES
from tidemark.spark import jars

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Commands that cannot take 2 seconds, and why.
FAST = {
    ("init",): "writes one config and 1,000 demo events (a fixed size)",
    ("jars", "list"): "reads the packaged lock and stats the cached jars",
    ("metrics", "dashboard"): "writes one JSON file from a template",
    ("metrics", "rules"): "writes one YAML file from a template",
    ("cluster", "status"): "one HTTP request to the master it started",
    ("cluster", "kill-worker"): "one signal to a recorded pid",
}


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; (exit code, stdout, what the terminal showed)."""
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "tidemark.cli.main", *args]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=cwd,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "160"},
    )
    os.close(follower)
    shown = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=400)
    reader.join(timeout=30)
    os.close(leader)
    return proc.returncode, stdout.decode("utf-8", "replace"), shown.decode("utf-8", "replace")


def test_every_command_that_can_take_two_seconds_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    env = dict(os.environ)
    landing, checkpoint, log = tmp_path / "landing", tmp_path / "checkpoint", tmp_path / "checkpoint-monitor"
    config = write_config(tmp_path, source={"max_files_per_trigger": 2}, checkpoint={"min_batches_to_retain": 100})
    adopted = tmp_path / "adopted"
    adopted.mkdir()
    new_job = write_config(adopted, source={"path": str(landing)})
    kafka = tmp_path / "kafka"
    kafka.mkdir()
    kafka_config = write_config(
        kafka,
        source=kafka_source("127.0.0.1:9", "t"),
    )
    home = tmp_path / "home"  # no ~/.m2: `jars fetch` downloads into an empty cache, as on a new machine
    home.mkdir()
    fetch_env = {**env, "TIDEMARK_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(home)}
    fetch_env[jars.REPOSITORY_ENV] = jars.repository()

    # (command, environment, what the terminal must show); in order: each may use what the earlier ones made.
    walk: list[tuple[list[str], dict[str, str], str]] = [
        (["generate", str(landing), "--events", "3000", "--files", "6", "--keys", "5"], env, "writing 3,000 events"),
        (["run", str(config), "--available-now"], env, "starting Spark"),
        (["checkpoint", "inspect", str(checkpoint)], env, "listing"),
        (["checkpoint", "prune", str(checkpoint), "--keep", "2"], env, "listing"),
        (["state", "stats", str(checkpoint), "--reader", "files"], env, "reading state stores"),
        (["state", "show", str(checkpoint), "--reader", "files"], env, "reading operator 0"),
        (["state", "diff", str(checkpoint), "--from", "1", "--to", "2"], env, "comparing state stores"),
        (["state", "expired", str(checkpoint)], env, "judging state stores"),
        (["state", "repartition", str(checkpoint), "--partitions", "3"], env, "listing"),
        (["check", str(config)], env, "starting Spark"),
        (["audit", str(config)], env, "checking committed batches"),
        (["recover", str(config)], env, "starting Spark"),
        (["adopt", str(new_job), "--from-checkpoint", str(checkpoint)], env, "starting Spark"),
        (["analyze", str(log)], env, "reading the progress log"),
        (["report", str(log), "-o", str(tmp_path / "report.html")], env, "reading the progress log"),
        (["plan", "memory", "--from-log", str(log)], env, "reading the progress log"),
        (["plan", "checkpoint", str(log)], env, "reading the progress log"),
        (["jars", "fetch", str(kafka_config)], fetch_env, "kafka-clients"),
        (["cluster", "up", "--run-dir", str(tmp_path / "cluster"), "--workers", "1"], env, "waiting for 1 worker(s)"),
        (["cluster", "down", "--run-dir", str(tmp_path / "cluster")], env, "stopping 2 daemon(s)"),
    ]
    walked = {tuple(args[:2]) if tuple(args[:2]) in LEAVES else (args[0],) for args, _, _ in walk}
    assert set(LEAVES) == walked | set(FAST), {
        "neither walked nor FAST": sorted(set(LEAVES) - walked - set(FAST)),
        "not a command": sorted((walked | set(FAST)) - set(LEAVES)),
    }
    try:
        for args, environment, expected in walk:
            code, stdout, shown = _on_a_terminal(args, environment, tmp_path)
            assert code == 0, (args, code, stdout[-1500:], shown[-1500:])
            assert expected in shown, (args, expected, shown[-1500:])
            assert "Traceback" not in shown, (args, shown[-3000:])
    finally:
        if (tmp_path / "cluster").exists():  # whatever happened, nothing this test started stays
            command = [sys.executable, "-m", "tidemark.cli.main", "cluster", "down", "--run-dir"]
            subprocess.run([*command, str(tmp_path / "cluster")], capture_output=True, timeout=120, check=False)
