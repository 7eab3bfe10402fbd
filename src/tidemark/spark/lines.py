"""What each Spark line and release offers: the one place that knows Spark versions (everything else asks here).

Read off every pyspark release's source distribution by tools/spark_lines/releases.py into `releases.json` beside
this module: the Hadoop, Scala, py4j and RocksDB it bundles, whether it ships the Scala compiler, the protobuf
runtime its transformWithStateInPandas code checks for, its Python classifiers, and which of the features below
Spark's own shipped code has (a class in its jars, a key in its SQLConf, a method in its Python code). The WASB
driver is Hadoop's: hadoop-azure of the bundled Hadoop version has it or not (3.5.0 keeps only a stub that
throws). docs/compatibility.md gives the sources. Nothing here starts a JVM: the installed Spark is the pyspark
package's version.
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass
from functools import cache
from importlib import metadata, resources

from tidemark.compat import StrEnum
from tidemark.errors import EnvironmentProblem

RELEASES_NAME = "releases.json"


class Feature(StrEnum):
    """A Spark capability tidemark uses where the installed Spark has it."""

    STATE_READER = "the statestore and state-metadata readers"
    OPERATOR_METADATA = "state operator metadata (state/<op>/_metadata)"
    TRANSFORM_WITH_STATE_PANDAS = "transformWithStateInPandas"
    TRANSFORM_WITH_STATE_ROWS = "row-based transformWithState in Python"
    CHANGELOG_CHECKPOINTING = "RocksDB changelog checkpointing"
    CHECKPOINT_FORMAT_V2 = "checkpoint format v2 (spark.sql.streaming.stateStore.checkpointFormatVersion)"
    JOIN_STATE_V4 = "join state format 4 (stream-stream join state keyed by join key and event time)"
    OFFSET_LOG_V2 = "the offset log v2 (sources named; spark.sql.streaming.offsetLog.formatVersion = 2)"
    MERGE_OPERATOR_V2 = "RocksDB merge operator v2 (list state values without a ',' between them)"
    COMMIT_LOG_V3 = "the commit log v3 (sinks named; spark.sql.streaming.queryEvolution.enableSinkEvolution)"
    OFFLINE_REPARTITION = "Spark's own offline state repartition (StreamingCheckpointManager.repartition)"
    WASB = "the WASB driver for wasb:// and wasbs:// (hadoop-azure)"
    STATE_HELPER = "tidemark's JVM helper (compiled with the Scala compiler the pyspark wheel ships)"
    STATE_REWRITE = "tidemark's JVM state writer (state repartition; Spark's column-family state store API)"
    ABFS_OVER_BLOB = "ABFS over the Blob endpoint (hadoop-azure 3.4.2+, HADOOP-19226): abfs:// on a storage emulator"
    ABFS_WORKLOAD_IDENTITY = "ABFS's workload identity token provider (hadoop-azure 3.4+)"


class Defect(StrEnum):
    """A known Spark bug tidemark works around, or a refusal it warns of, on the lines that have it."""

    KAFKA_METRICS_AFTER_RESTART = (
        "Spark 4.1's Kafka source fails the progress report of the batch a restart re-runs "
        "(NullPointerException in KafkaMicroBatchStream.metrics)"
    )
    MISSING_METADATA_REFUSED = (
        "Spark 4.2+ refuses to restart a checkpoint whose metadata file is missing while offsets/ or commits/ hold "
        "entries (STREAMING_CHECKPOINT_MISSING_METADATA_FILE); earlier lines write a new one with a new query id"
    )
    OBSERVED_AGGREGATOR_NOT_SERIALIZABLE = (
        "Spark 3.5 fails a task whose observation holds a Scala Aggregator (NotSerializableException: its "
        "ScalaAggregator's generated input projection travels back in the task result)"
    )


@dataclass(frozen=True)
class Release:
    """One pyspark release, as its sdist shows it."""

    version: str
    hadoop: str  # hadoop-client-api's version
    scala: str  # scala-library's version, e.g. "2.13.17"
    scala_compiler: bool  # scala-compiler-<v>.jar ships in the wheel (tidemark's state helper is compiled with it)
    py4j: str
    rocksdbjni: str
    protobuf_gencode: str | None  # the protobuf runtime transformWithStateInPandas' generated code requires at least
    python: tuple[str, ...]  # the Python classifiers, e.g. ("3.10", ..., "3.14")
    features: frozenset[Feature]

    @property
    def scala_binary(self) -> str:
        """The Scala binary version of the jars ("2.12", "2.13"), as in Maven artifact names."""
        return ".".join(self.scala.split(".")[:2])


@dataclass(frozen=True)
class SparkLine:
    """One Spark line (major.minor): its newest release tidemark knows of, and what comes with it."""

    line: str
    newest: str
    scala: str  # Scala binary version of the pip package's jars ("2.12" / "2.13")
    hadoop: str  # Hadoop client bundled in the newest release
    python: tuple[str, str]  # oldest and newest Python of the newest release's classifiers
    java: str
    features: frozenset[Feature]

    def has(self, feature: Feature) -> bool:
        """True when this line offers the feature."""
        return feature in self.features


# Java is not in a pyspark sdist: Spark's documentation per line (shared/reference/spark-versions.md).
_JAVA = {"3.5": "8/11/17", "4.0": "17+", "4.1": "17+", "4.2": "17+", "4.3": "17+"}
# Known defects per line, read in Spark's code: 4.1's KafkaMicroBatchStream.metrics dereferences Some(null) after a
# restart (3.5/4.0 check for null, 4.2 uses Option).
_DEFECTS: dict[str, frozenset[Defect]] = {
    "3.5": frozenset({Defect.OBSERVED_AGGREGATOR_NOT_SERIALIZABLE}),
    "4.1": frozenset({Defect.KAFKA_METRICS_AFTER_RESTART}),
    # Tried: a restart after deleting `metadata` fails on 4.2.1 and 4.3.0, runs on 4.1.1.
    "4.2": frozenset({Defect.MISSING_METADATA_REFUSED}),
    "4.3": frozenset({Defect.MISSING_METADATA_REFUSED}),
}
# What hadoop-azure of a Hadoop version has (read off the jars of the lock): workload identity from 3.4, the
# Blob-endpoint route for ABFS (FnsOverBlob) from 3.4.2.
_HADOOP_FEATURES = ((Feature.ABFS_WORKLOAD_IDENTITY, "3.4.0"), (Feature.ABFS_OVER_BLOB, "3.4.2"))
OLDEST_SUPPORTED = "3.5"


def _order(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


@cache
def releases() -> dict[str, Release]:
    """Every pyspark release tidemark knows, by version (oldest first)."""
    text = resources.files("tidemark.spark").joinpath(RELEASES_NAME).read_text(encoding="utf-8")
    data = json.loads(text)
    wasb = data.get("hadoop_azure_wasb", {})
    found = {}
    for version, entry in data["releases"].items():
        features = {Feature[name] for name in entry["features"]}
        if wasb.get(entry["hadoop"]):
            features.add(Feature.WASB)
        features |= {feature for feature, since in _HADOOP_FEATURES if _order(entry["hadoop"]) >= _order(since)}
        if entry["scala_compiler"]:
            features.add(Feature.STATE_HELPER)
            # The writer is compiled against the column-family state store API that came with transformWithState
            # in Spark 4.0 (it does not compile on 3.5); CI compiles it on every line this claims it for.
            if Feature.TRANSFORM_WITH_STATE_PANDAS in features:
                features.add(Feature.STATE_REWRITE)
        found[version] = Release(
            version=version,
            hadoop=entry["hadoop"],
            scala=entry["scala"],
            scala_compiler=bool(entry["scala_compiler"]),
            py4j=entry["py4j"],
            rocksdbjni=entry["rocksdbjni"],
            protobuf_gencode=entry.get("protobuf_gencode"),
            python=tuple(entry["python_classifiers"]),
            features=frozenset(features),
        )
    return dict(sorted(found.items(), key=lambda item: _order(item[0])))


def line_key(version: str) -> str:
    """The line ("4.1") of a Spark version ("4.1.4")."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        msg = f"cannot read a Spark version from {version!r}"
        raise EnvironmentProblem(msg)
    return f"{match.group(1)}.{match.group(2)}"


def _lines() -> dict[str, SparkLine]:
    by_line: dict[str, list[Release]] = {}
    for release in releases().values():
        by_line.setdefault(line_key(release.version), []).append(release)
    found = {}
    for line, known in by_line.items():
        newest = known[-1]
        found[line] = SparkLine(
            line=line,
            newest=newest.version,
            scala=newest.scala_binary,
            hadoop=newest.hadoop,
            python=(newest.python[0], newest.python[-1]),
            java=_JAVA.get(line, "17+"),
            features=newest.features,
        )
    return found


LINES: dict[str, SparkLine] = _lines()


def installed_version() -> str:
    """The installed pyspark's version (no JVM started)."""
    import pyspark

    return str(pyspark.__version__)


def release_of(version: str) -> Release:
    """What a Spark version bundles and offers: its own entry, else the newest known release of its line (or of the
    newest line, for a line newer than this table); an EnvironmentProblem for Spark older than tidemark supports.
    """
    known = releases()
    exact = known.get(version)
    if exact is not None:
        return exact
    line = line_of(version)
    return known[line.newest]


def line_of(version: str) -> SparkLine:
    """The line a Spark version belongs to; an EnvironmentProblem for a line older than tidemark supports."""
    key = line_key(version)
    found = LINES.get(key)
    if found is not None:
        return found
    newest = max(LINES, key=_order)
    if _order(key) > _order(newest):
        # A newer line than this table: assume it keeps what the newest known line has.
        base = LINES[newest]
        return SparkLine(key, base.newest, base.scala, base.hadoop, base.python, base.java, base.features)
    msg = f"Spark {version} is older than tidemark supports (Spark {OLDEST_SUPPORTED} or newer)"
    raise EnvironmentProblem(msg)


def installed() -> SparkLine:
    """The line of the installed pyspark."""
    return line_of(installed_version())


def hadoop_of(version: str | None = None) -> str:
    """The Hadoop version a Spark release bundles (default: the installed one): the key of Hadoop's jar closures."""
    return release_of(version or installed_version()).hadoop


def scala_of(version: str | None = None) -> str:
    """The Scala binary version ("2.12", "2.13") of a Spark release's jars (default: the installed one)."""
    return release_of(version or installed_version()).scala_binary


def has(feature: Feature, spark_version: str | None = None) -> bool:
    """True when the Spark version (default: the installed one) offers the feature."""
    return feature in release_of(spark_version or installed_version()).features


def first_line_with(feature: Feature) -> str:
    """The oldest line that has a feature."""
    return min((line for line, spec in LINES.items() if spec.has(feature)), key=_order)


def last_line_with(feature: Feature) -> str | None:
    """The newest line that has a feature (None when every line since it has it too)."""
    lines = sorted(LINES, key=_order)
    having = [line for line in lines if LINES[line].has(feature)]
    return None if not having or having[-1] == lines[-1] else having[-1]


def lacking(feature: Feature, spark_version: str | None = None) -> str | None:
    """None when the Spark (default: the installed one) has the feature, else one line saying where to get it."""
    version = spark_version or installed_version()
    if has(feature, version):
        return None
    first = first_line_with(feature)
    last = last_line_with(feature)
    if last is not None and _order(line_key(version)) > _order(last):
        return f"{feature} is not in Spark {version}: it was removed after Spark {last}"
    return f"{feature} needs Spark {first} or newer (installed: Spark {version})"


def has_defect(defect: Defect, spark_version: str | None = None) -> bool:
    """True when the Spark (default: the installed one) has a known defect tidemark works around."""
    version = spark_version or installed_version()
    return defect in _DEFECTS.get(line_key(version), frozenset())


def require(feature: Feature, spark_version: str | None = None) -> None:
    """Raise a one-line EnvironmentProblem when the Spark (default: installed) lacks the feature."""
    problem = lacking(feature, spark_version)
    if problem is not None:
        raise EnvironmentProblem(problem)


def python_problem(spark_version: str | None = None, python_version: str | None = None) -> str | None:
    """None when the Spark release supports this Python (its classifiers), else one line naming what does.

    Only a Python newer than the release's classifiers is a problem: Spark 3.5's pandas support imports distutils,
    which Python 3.12 removed (a pandas UDF fails with ModuleNotFoundError).
    """
    version = spark_version or installed_version()
    python = python_version or ".".join(platform.python_version_tuple()[:2])
    supported = release_of(version).python
    if not supported or _order(python) <= _order(supported[-1]):
        return None
    newer = [
        line for line, spec in sorted(LINES.items(), key=lambda kv: _order(kv[0])) if python in _python_range(spec)
    ]
    hint = f"; Spark {newer[0]} or newer runs on Python {python}" if newer else ""
    return (
        f"Spark {version} supports Python {supported[0]} to {supported[-1]} (installed: Python {python}): "
        f"use Python {supported[-1]}{hint}"
    )


# The first Spark line whose Connect client hears streaming listener events itself (its client-side listener bus);
# 3.5's client pickles a listener to the server and runs it there, so a client's progress log, watchdog and
# metrics would hear nothing.
CONNECT_FIRST_LINE = "4.0"


def connect_problem(side: str, spark_version: str | None = None) -> str | None:
    """None when this Spark (default: the installed client's) can be tidemark's Spark Connect client or server; else
    one line naming the Spark that can."""
    version = spark_version or installed_version()
    if _order(version) >= _order(CONNECT_FIRST_LINE):
        return None
    return (
        f"tidemark over Spark Connect needs Spark {CONNECT_FIRST_LINE} or newer ({side} runs Spark {version}, whose "
        "Connect client hears no streaming listener events: no progress log, watchdog or metrics); run without "
        "SPARK_REMOTE, or on Spark 4.0+"
    )


def _python_range(line: SparkLine) -> list[str]:
    low, high = line.python
    major = low.split(".")[0]
    return [f"{major}.{minor}" for minor in range(int(low.split(".")[1]), int(high.split(".")[1]) + 1)]


def require_python(spark_version: str | None = None) -> None:
    """Raise a one-line EnvironmentProblem when the installed Python is newer than the Spark release supports."""
    problem = python_problem(spark_version)
    if problem is not None:
        raise EnvironmentProblem(problem)


def protobuf_problem(spark_version: str | None = None, protobuf_version: str | None = None) -> str | None:
    """None when protobuf can run the Spark release's transformWithStateInPandas messages, else one line.

    Spark's generated code (StateMessage_pb2) checks the runtime: at least the version it was generated with, and
    no more than one major version newer.
    """
    version = spark_version or installed_version()
    needed = release_of(version).protobuf_gencode
    if needed is None:
        return None
    try:
        installed_protobuf = protobuf_version or metadata.version("protobuf")
    except metadata.PackageNotFoundError:
        installed_protobuf = None
    fix = f"pip install 'protobuf>={needed},<7'"
    if installed_protobuf is None:
        return f"transformWithStateInPandas on Spark {version} needs the protobuf package: {fix}"
    have, want = _order(installed_protobuf), _order(needed)
    if have < want or have[0] > want[0] + 1:
        return (
            f"transformWithStateInPandas on Spark {version} needs protobuf {needed} up to {want[0] + 1}.x "
            f"(installed: {installed_protobuf}): {fix}"
        )
    return None


def kafka_package(spark_version: str | None = None) -> str:
    """Spark's Kafka connector coordinates for a Spark version (default: the installed one)."""
    version = spark_version or installed_version()
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala_of(version)}:{version}"
