"""The one factory that makes (or reuses) the Spark session; never called at import time."""

from __future__ import annotations

import logging
import os
import shutil
import sys
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
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


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
