"""Spark Connect: which endpoint a command talks to, how it is named in output, and what is not available there.

The endpoint comes from the environment variable the PySpark client itself reads (SPARK_REMOTE), else from the
config's [spark] remote. An endpoint can carry a token (sc://host:port/;token=...): only host and port are ever
shown. A Connect session has no JVM in this process: no py4j, no SparkContext, no jars added from here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tidemark.errors import EnvironmentProblem, UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REMOTE_VARIABLE = "SPARK_REMOTE"


class UnavailableOnConnect(UsageError):
    """What a command asked for needs a JVM in this process, and the session is a Spark Connect one (exit 2)."""


def endpoint(configured: str | None = None) -> str | None:
    """The Spark Connect endpoint to use: SPARK_REMOTE, else the config's [spark] remote, else None (local JVM)."""
    given = os.environ.get(REMOTE_VARIABLE, "").strip()
    return given or configured or None


def label(url: str) -> str:
    """sc://host:port of an endpoint: its path and parameters (a token, a user id) are never shown."""
    split = urlsplit(url.split(";", 1)[0])
    host = split.hostname or "?"
    try:
        port = split.port
    except ValueError:
        port = None
    return f"sc://{host}:{port or 15002}"


def mode(remote: str | None, master: str) -> str:
    """How a command runs Spark, for its first line: 'Spark Connect sc://host:port' or the local master."""
    return f"Spark Connect {label(remote)}" if remote else master


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (its class lives in pyspark.sql.connect; no import of it is needed)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def refuse_on_connect(spark: SparkSession, what: str, instead: str) -> None:
    """One line (exit 2) when spark is a Connect session: what needs a JVM in this process, and what to do."""
    if is_connect(spark):
        msg = f"{what} needs a local Spark (a JVM in this process) and is not available over Spark Connect: {instead}"
        raise UnavailableOnConnect(msg)


# The first Spark line whose Connect client hears streaming listener events itself (its client-side listener bus);
# 3.5's client pickles a listener to the server and runs it there, so the progress log, the watchdog and the
# metrics of a client would hear nothing.
FIRST_LINE = (4, 0)


def require_connect_line(version: str, side: str) -> None:
    """One line (exit 1) when a Spark Connect client or server is older than FIRST_LINE."""
    parts = version.split(".")
    found = (int(parts[0]), int(parts[1])) if len(parts) > 1 and parts[0].isdigit() and parts[1].isdigit() else (0, 0)
    if found < FIRST_LINE:
        msg = (
            f"tidemark over Spark Connect needs Spark {FIRST_LINE[0]}.{FIRST_LINE[1]} or newer ({side} runs Spark "
            f"{version}, whose Connect client hears no streaming listener events: no progress log, watchdog or "
            "metrics); run without SPARK_REMOTE, or on Spark 4.0+"
        )
        raise EnvironmentProblem(msg)


def default_parallelism(spark: SparkSession) -> int:
    """The session's default parallelism; over Connect the server's spark.default.parallelism when it sets one,
    else 0 (the caller's own estimate stands)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    given = spark.conf.get("spark.default.parallelism", None)
    return int(given) if given and given.isdigit() else 0
