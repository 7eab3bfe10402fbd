"""The one factory that makes (or reuses) the Spark session; never called at import time."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.errors import EnvironmentProblem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Settings that only take effect when the JVM starts; on a reused session they are left alone.
_STATIC_PREFIXES = (
    "spark.driver.",
    "spark.executor.",
    "spark.master",
    "spark.ui.",
    "spark.jars",
    "spark.app.",
    "spark.redaction.",
)
# Hadoop settings: spark.hadoop.<key> reaches the Hadoop configuration when the JVM starts; on a running session
# the bare <key> does, because Spark copies every session setting into each query's Hadoop configuration.
HADOOP_PREFIX = "spark.hadoop."
# Where the JVM's stderr goes (Spark's log4j output, its warnings, task stack traces); None: the terminal.
_jvm_log: dict[str, Path | None] = {"path": None}
# Spark logs written by earlier commands that are kept (the newest ones).
_JVM_LOGS_KEPT = 20


def runtime_key(key: str) -> str:
    """The key a running session takes a setting under: spark.hadoop.fs.x -> fs.x, others unchanged."""
    return key[len(HADOOP_PREFIX) :] if key.startswith(HADOOP_PREFIX) else key


# Read when a stateful query starts: every pipeline query gets them from run_pipeline (and gives them back), so a
# reused session (tests, notebooks, recovery) is not left with one pipeline's state store tuning for the next.
_QUERY_START_PREFIXES = ("spark.sql.streaming.stateStore.",)


def check_java() -> str:
    """Return the java executable Spark will use, or raise a one-line EnvironmentProblem."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        msg = (
            "no Java runtime found: Spark needs Java 17 or 21 "
            "(install one, e.g. 'apt-get install openjdk-17-jre-headless', or set JAVA_HOME)"
        )
        raise EnvironmentProblem(msg)
    return found


def _prepare_environment() -> None:
    check_java()
    # Python workers must run this interpreter (the venv's), or they cannot import pandas/pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def send_jvm_output_to(folder: Path | None) -> None:
    """Write the JVM's stderr (Spark's log, warnings, Java stack traces) to a new file in folder, not the terminal.

    The CLI calls this unless --debug: a command's errors reach the user as one line, Spark's own account of
    them stays in the file. Only a JVM this process starts is affected; None restores the terminal.
    """
    if folder is None:
        _jvm_log["path"] = None
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in sorted(folder.glob("spark-*.log"))[:-_JVM_LOGS_KEPT]:
            old.unlink(missing_ok=True)
    except OSError as exc:  # a read-only home: Spark's log stays on the terminal
        log.debug("cannot keep Spark's log in %s: %s", folder, exc)
        _jvm_log["path"] = None
        return
    _jvm_log["path"] = folder / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"


def jvm_log_path() -> Path | None:
    """The file the JVM's stderr goes to, when send_jvm_output_to chose one."""
    return _jvm_log["path"]


# The JVMs this process started (spark-submit execs java, so each is our child). A JVM interrupted before its
# gateway wrote the connection file never exits on its own (Spark's PythonGatewayServer dies on the missing file,
# its py4j thread keeps the JVM alive): _start_context kills it at once. Like SIGINT, SIGTERM is ignored by the JVM:
# a stop sent to the whole process group (a terminal, systemd) reaches tidemark, which ends Spark in order.
_started: list[subprocess.Popen[bytes]] = []


def _ignoring_stop_signals(preexec: Callable[[], object] | None) -> Callable[[], None]:
    def ignore() -> None:
        if preexec is not None:
            preexec()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    return ignore


def _start_context(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the JVM (its stderr in the log file, when one is chosen), and the SparkContext on it (the builder then
    reuses it); the JVM's process is recorded so that an interrupted command can end it."""
    from pyspark import SparkConf, SparkContext, java_gateway

    path = _jvm_log["path"]
    if SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    gateway_module: Any = java_gateway  # pyspark's module spawns the JVM through its own name Popen
    popen = gateway_module.Popen
    launched: list[subprocess.Popen[bytes]] = []

    def recorded(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        if os.name == "posix":
            kwargs["preexec_fn"] = _ignoring_stop_signals(kwargs.get("preexec_fn"))
        process: subprocess.Popen[bytes] = popen(*args, **kwargs)
        launched.append(process)
        return process

    gateway_module.Popen = recorded
    try:
        with path.open("ab") if path is not None else nullcontext(None) as log_file:  # the JVM keeps its own copy
            kwargs = {"stderr": log_file} if log_file is not None else None
            gateway = gateway_module.launch_gateway(conf, popen_kwargs=kwargs)
    except BaseException:
        for process in launched:  # half started: nothing of it to keep, and it would never exit by itself
            process.kill()
            process.wait()
        raise
    finally:
        gateway_module.Popen = popen
    _started.extend(launched)
    SparkContext(conf=conf, gateway=gateway)


def end_started_jvms(grace: float = 15.0) -> int:
    """End the JVMs this process started that still run, before it exits: their stdin is closed (Spark's gateway
    then exits the JVM, its shutdown hooks run), and one still running after grace seconds is killed. For an
    interrupted command: nothing it started may outlive it. Returns how many were ended."""
    ended = 0
    for process in _started:
        if process.poll() is not None:
            continue
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace)
        ended += 1
    _started.clear()
    return ended


def build_session(
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "tidemark",
    log_level: str = "ERROR",
    remote: str | None = None,
) -> SparkSession:
    """Create the Spark session, or reuse the active one and apply the runtime settings of conf.

    remote: a Spark Connect endpoint (sc://...): the session is a Connect client, built here from the same
    settings (the ones a running server can take), and no JVM is started in this process.
    """
    if remote is not None:
        return _connect(remote, conf or {}, app_name)
    _prepare_environment()
    from pyspark.sql import SparkSession

    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    settings.update(conf or {})
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in settings.items():
            if not key.startswith(_STATIC_PREFIXES + _QUERY_START_PREFIXES):
                active.conf.set(runtime_key(key), value)
        return active
    from tidemark.steps import step

    with _keep_interrupt_handler(), _local_only(), step(f"starting Spark ({master})"):
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        _start_context(master, app_name, settings)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _connect(remote: str, conf: Mapping[str, str], app_name: str) -> SparkSession:
    """A Spark Connect session on remote with the runtime settings of conf (a server's JVM settings, its jars
    and its static SQL settings are the server's own: they are left out, and logged)."""
    from pyspark.sql import SparkSession

    from tidemark.connect import label
    from tidemark.steps import step

    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    with step(f"connecting to Spark Connect ({label(remote)})"):
        spark = SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
        left: list[str] = []
        for given, value in conf.items():
            key = runtime_key(given)
            if given.startswith(_STATIC_PREFIXES) or key in _SERVER_ONLY:
                left.append(given)
                continue
            try:
                spark.conf.set(key, value)
            except Exception as exc:  # a static SQL setting: the server's to choose
                log.debug("cannot change %s over Spark Connect: %s", key, type(exc).__name__)
                left.append(given)
    if left:
        log.info("left to the Spark Connect server (set when it starts): %s", ", ".join(sorted(left)))
    return spark


# Static SQL settings a server takes when it starts, never from a client.
_SERVER_ONLY = frozenset({"spark.sql.extensions", "spark.sql.warehouse.dir"})


@contextmanager
def _local_only() -> Iterator[None]:
    """A local session is being built: PySpark's builder must not take SPARK_REMOTE (it refuses a master beside
    it), so the variable is out of the environment while the session starts."""
    remote = os.environ.pop("SPARK_REMOTE", None)
    try:
        yield
    finally:
        if remote is not None:
            os.environ["SPARK_REMOTE"] = remote


@contextmanager
def _keep_interrupt_handler() -> Iterator[None]:
    """pyspark's SparkContext installs its own SIGINT handler; the CLI's (which also cancels Spark's jobs) stays."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if getattr(previous, "tidemark_interrupt", False) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)


@contextmanager
def runtime_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Apply the runtime-settable entries of conf for the duration, then put the previous values back."""
    previous: dict[str, str | None] = {}
    for given, value in conf.items():
        if given.startswith(_STATIC_PREFIXES):
            continue
        key = runtime_key(given)
        old = spark.conf.get(key, None)
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # static SQL settings only take effect when a session is created
            log.debug("cannot change %s on a running session: %s", key, exc)
            continue
        previous[key] = old
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
