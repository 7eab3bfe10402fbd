"""Spark Connect: which endpoint a command talks to, how it is named in output, and what is not available there.

The endpoint comes from the environment variable the PySpark client itself reads (SPARK_REMOTE), else from the
config's [spark] remote. An endpoint can carry a token (sc://host:port/;token=...): only host and port are ever
shown. A Connect session has no JVM in this process: no py4j, no SparkContext, no jars added from here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tidemark.errors import UsageError

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


def default_parallelism(spark: SparkSession) -> int:
    """The session's default parallelism; over Connect the server's spark.default.parallelism when it sets one,
    else 0 (the caller's own estimate stands)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    given = spark.conf.get("spark.default.parallelism", None)
    return int(given) if given and given.isdigit() else 0
