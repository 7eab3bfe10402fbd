"""Start and stop the Spark daemons by pid, checking each pid is still the process tidemark started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidemark.cluster.model import ClusterError, ProcessRecord

LOOPBACK = "127.0.0.1"
# Every daemon command line carries one of these; a pid whose command line lacks it was reused by the OS.
DAEMON_CLASSES = ("org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker")


def spark_home() -> Path:
    """The Spark installation to run the daemons from: $SPARK_HOME, else the pip-installed pyspark."""
    configured = os.environ.get("SPARK_HOME")
    if configured and (Path(configured) / "bin" / "spark-class").exists():
        return Path(configured)
    try:
        import pyspark
    except ImportError as exc:
        msg = "pyspark is not installed in this environment; install tidemark with its dependencies"
        raise ClusterError(msg) from exc
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        msg = f"{home} has no bin/spark-class; set SPARK_HOME to a full Spark installation"
        raise ClusterError(msg)
    return home


def free_port() -> int:
    """A TCP port on the loopback address that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def daemon_environment(home: Path) -> dict[str, str]:
    """The environment of every daemon: loopback only, and Python workers that run this interpreter."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": os.environ.get("SPARK_DAEMON_MEMORY", "512m"),
        }
    )
    return env


def start_daemon(home: Path, args: Sequence[str], log: Path, env: Mapping[str, str]) -> int:
    """Run `spark-class args` detached in its own process group, output to log; return its pid."""
    command = [str(home / "bin" / "spark-class"), *args]
    with log.open("ab") as handle:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,  # own process group: stopping it also stops the executors it forked
        )
    return process.pid


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    # The command name in parentheses may contain spaces; fields after it are plain.
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (Linux), to tell a reused pid from ours."""
    fields = _proc_stat(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_ours(record: ProcessRecord) -> bool:
    """True when the recorded pid runs and is still the Spark daemon tidemark started (not a reused pid)."""
    if not _pid_exists(record.pid):
        return False
    fields = _proc_stat(record.pid)
    if fields is None:
        # No /proc (macOS): the pid exists, which is the best evidence available.
        return True
    if fields[0] == "Z":
        return False
    if record.start_ticks is not None:
        # pid plus start time names one process for the machine's uptime; the command line is briefly empty
        # while spark-class execs java, so it is only the fallback.
        return start_ticks(record.pid) == record.start_ticks
    cmdline = _cmdline(record.pid) or ""
    # spark-class first runs a launcher, then execs java with the daemon class; either is ours.
    return any(name in cmdline for name in DAEMON_CLASSES) or "spark-class" in cmdline


def _reap(pid: int) -> None:
    # Daemons started by this very process would stay zombies until reaped.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def send_signal(record: ProcessRecord, sig: signal.Signals) -> bool:
    """Signal the daemon's process group (it and the executors it forked); False when it is gone."""
    if not is_ours(record):
        return False
    try:
        os.killpg(record.pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(record.pid, sig)
    return True


def wait_gone(record: ProcessRecord, timeout: float) -> bool:
    """Wait until the daemon has exited; True when it did within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not is_ours(record):
            return True
        time.sleep(0.2)
    _reap(record.pid)
    return not is_ours(record)


def stop(record: ProcessRecord, timeout: float = 20.0) -> str:
    """Stop one daemon: TERM, then KILL after timeout; returns 'stopped', 'forced' or 'gone'."""
    if not send_signal(record, signal.SIGTERM):
        return "gone"
    if wait_gone(record, timeout):
        return "stopped"
    send_signal(record, signal.SIGKILL)
    wait_gone(record, 5.0)
    return "forced"
