"""The one factory that makes (or reuses) the Spark session; never called at import time."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

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


def _start_context(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the JVM with its stderr in the log file, and the SparkContext on it (the builder then reuses it)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    path = _jvm_log["path"]
    if path is None or SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    with path.open("ab") as log_file:  # the JVM keeps its own copy of the descriptor
        gateway = launch_gateway(conf, popen_kwargs={"stderr": log_file})  # type: ignore[no-untyped-call]
    SparkContext(conf=conf, gateway=gateway)


def build_session(
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "tidemark",
    log_level: str = "ERROR",
) -> SparkSession:
    """Create the Spark session, or reuse the active one and apply the runtime settings of conf."""
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
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    from tidemark.steps import step

    with _keep_interrupt_handler(), step(f"starting Spark ({master})"):
        _start_context(master, app_name, settings)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


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
