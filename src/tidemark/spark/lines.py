"""What each Spark line offers: the one place that knows Spark versions (everything else asks here).

Read off each line's pyspark source distribution (setup.py, PKG-INFO, the jars it ships) and Spark's code and
release notes; docs/compatibility.md in the repository gives the sources. Nothing here starts a JVM: the
installed line comes from the pyspark package's version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidemark.compat import StrEnum
from tidemark.errors import EnvironmentProblem


class Feature(StrEnum):
    """A Spark capability tidemark uses where the installed Spark has it."""

    STATE_READER = "the statestore and state-metadata readers"
    OPERATOR_METADATA = "state operator metadata (state/<op>/_metadata)"
    TRANSFORM_WITH_STATE_PANDAS = "transformWithStateInPandas"
    TRANSFORM_WITH_STATE_ROWS = "row-based transformWithState in Python"
    CHANGELOG_CHECKPOINTING = "RocksDB changelog checkpointing"
    CHECKPOINT_FORMAT_V2 = "checkpoint format v2 (spark.sql.streaming.stateStore.checkpointFormatVersion)"
    OFFLINE_REPARTITION = "Spark's own offline state repartition"
    WASB = "the WASB driver for wasb:// and wasbs:// (hadoop-azure)"
    ABFS_OVER_BLOB = "ABFS over the Blob endpoint (hadoop-azure 3.4.2+, HADOOP-19226): abfs:// on a storage emulator"
    ABFS_WORKLOAD_IDENTITY = "ABFS's workload identity token provider (hadoop-azure 3.4+)"


class Defect(StrEnum):
    """A known Spark bug tidemark works around on the lines that have it."""

    KAFKA_METRICS_AFTER_RESTART = (
        "Spark 4.1's Kafka source fails the progress report of the batch a restart re-runs "
        "(NullPointerException in KafkaMicroBatchStream.metrics)"
    )


@dataclass(frozen=True)
class SparkLine:
    """One Spark line (major.minor) and what comes with it."""

    line: str
    newest: str  # the newest release of the line we know of
    scala: str  # Scala version of the pip package's jars ("2.12" / "2.13")
    hadoop: str  # Hadoop client bundled in the pip package
    python: tuple[str, str]  # oldest and newest Python the line supports
    java: str
    features: frozenset[Feature]
    # Read off each line's spark-sql-kafka jar (KafkaMicroBatchStream.metrics): 3.5 and 4.0 check the offsets
    # for null, 4.1.1 wraps them in Some, 4.2.0 in Option.
    defects: frozenset[Defect] = frozenset()

    def has(self, feature: Feature) -> bool:
        """True when this line offers the feature."""
        return feature in self.features


_ALL_4 = frozenset(
    {
        Feature.STATE_READER,
        Feature.OPERATOR_METADATA,
        Feature.TRANSFORM_WITH_STATE_PANDAS,
        Feature.CHANGELOG_CHECKPOINTING,
        Feature.CHECKPOINT_FORMAT_V2,
        Feature.WASB,
        Feature.ABFS_WORKLOAD_IDENTITY,
    }
)
LINES: dict[str, SparkLine] = {
    "3.5": SparkLine(
        "3.5",
        "3.5.9",
        "2.12",
        "3.3.4",
        ("3.8", "3.11"),
        "8/11/17",
        frozenset({Feature.CHANGELOG_CHECKPOINTING, Feature.WASB}),
    ),
    "4.0": SparkLine("4.0", "4.0.5", "2.13", "3.4.1", ("3.9", "3.13"), "17+", _ALL_4),
    "4.1": SparkLine(
        "4.1",
        "4.1.4",
        "2.13",
        "3.4.2",
        ("3.10", "3.14"),
        "17+",
        _ALL_4 | {Feature.TRANSFORM_WITH_STATE_ROWS, Feature.ABFS_OVER_BLOB},
        frozenset({Defect.KAFKA_METRICS_AFTER_RESTART}),
    ),
    "4.2": SparkLine(
        "4.2",
        "4.2.1",
        "2.13",
        "3.5.0",
        ("3.10", "3.14"),
        "17+",
        (_ALL_4 - {Feature.WASB})
        | {Feature.TRANSFORM_WITH_STATE_ROWS, Feature.OFFLINE_REPARTITION, Feature.ABFS_OVER_BLOB},
    ),
    "4.3": SparkLine(
        "4.3",
        "4.3.0",
        "2.13",
        "3.5.0",
        ("3.11", "3.14"),
        "17+",
        (_ALL_4 - {Feature.WASB})
        | {Feature.TRANSFORM_WITH_STATE_ROWS, Feature.OFFLINE_REPARTITION, Feature.ABFS_OVER_BLOB},
    ),
}
OLDEST_SUPPORTED = "3.5"


def _line_key(version: str) -> str:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        msg = f"cannot read a Spark version from {version!r}"
        raise EnvironmentProblem(msg)
    return f"{match.group(1)}.{match.group(2)}"


def _order(line: str) -> tuple[int, int]:
    major, minor = line.split(".")
    return int(major), int(minor)


def installed_version() -> str:
    """The installed pyspark's version (no JVM started)."""
    import pyspark

    return str(pyspark.__version__)


def line_of(version: str) -> SparkLine:
    """The line a Spark version belongs to; an EnvironmentProblem for a line tidemark does not know."""
    key = _line_key(version)
    found = LINES.get(key)
    if found is not None:
        return found
    newest = max(LINES, key=_order)
    if _order(key) > _order(newest):
        # A newer line than this table: assume it keeps what the newest known line has.
        base = LINES[newest]
        return SparkLine(key, version, base.scala, base.hadoop, base.python, base.java, base.features)
    msg = f"Spark {version} is older than tidemark supports (Spark {OLDEST_SUPPORTED} or newer)"
    raise EnvironmentProblem(msg)


def installed() -> SparkLine:
    """The line of the installed pyspark."""
    return line_of(installed_version())


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
    if line_of(version).has(feature):
        return None
    first = first_line_with(feature)
    last = last_line_with(feature)
    if last is not None and _order(_line_key(version)) > _order(last):
        return f"{feature} is not in Spark {version}: it was removed after Spark {last}"
    return f"{feature} needs Spark {first} or newer (installed: Spark {version})"


def require(feature: Feature, spark_version: str | None = None) -> None:
    """Raise a one-line EnvironmentProblem when the Spark (default: installed) lacks the feature."""
    problem = lacking(feature, spark_version)
    if problem is not None:
        raise EnvironmentProblem(problem)


def has_defect(defect: Defect, spark_version: str | None = None) -> bool:
    """True when the Spark (default: the installed one) has a known defect tidemark works around."""
    return defect in line_of(spark_version or installed_version()).defects


def kafka_package(spark_version: str | None = None) -> str:
    """Spark's Kafka connector coordinates for a Spark version (default: the installed one)."""
    version = spark_version or installed_version()
    return f"org.apache.spark:spark-sql-kafka-0-10_{line_of(version).scala}:{version}"
