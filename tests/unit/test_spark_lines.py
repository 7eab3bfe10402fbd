"""tidemark.spark.lines: the table read off every pyspark sdist, and the one-line answers built from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.errors import EnvironmentProblem
from tidemark.spark import jars
from tidemark.spark.artifacts import JarFeature, coordinates
from tidemark.spark.lines import (
    LINES,
    Feature,
    hadoop_of,
    has,
    kafka_package,
    lacking,
    line_of,
    protobuf_problem,
    python_problem,
    release_of,
    releases,
    require,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "tidemark"


def test_every_supported_line_has_its_releases() -> None:
    assert sorted(LINES) == ["3.5", "4.0", "4.1", "4.2", "4.3"]
    versions = list(releases())
    for line in LINES.values():
        of_line = [v for v in versions if v.startswith(line.line + ".")]
        assert of_line and of_line[-1] == line.newest
        # Patch numbers without holes: every release of the line is in the table.
        assert [int(v.split(".")[2]) for v in of_line] == list(range(len(of_line)))


def test_what_the_sdists_say_about_each_line() -> None:
    # Read off the sdists (releases.json); these are the facts the rest of tidemark relies on.
    assert {v: r.hadoop for v, r in releases().items() if v in ("3.5.0", "3.5.9", "4.0.0", "4.1.1", "4.2.1")} == {
        "3.5.0": "3.3.4",
        "3.5.9": "3.3.4",
        "4.0.0": "3.4.1",
        "4.1.1": "3.4.2",
        "4.2.1": "3.5.0",
    }
    assert line_of("3.5.9").scala == "2.12" and line_of("4.0.5").scala == "2.13"
    assert all(r.scala_compiler for r in releases().values())
    assert release_of("4.0.5").protobuf_gencode == "5.28.3"
    assert release_of("3.5.9").protobuf_gencode is None


@pytest.mark.parametrize(
    ("feature", "first"),
    [
        (Feature.STATE_READER, "4.0"),
        (Feature.OPERATOR_METADATA, "4.0"),
        (Feature.TRANSFORM_WITH_STATE_PANDAS, "4.0"),
        (Feature.TRANSFORM_WITH_STATE_ROWS, "4.1"),
        (Feature.CHANGELOG_CHECKPOINTING, "3.5"),
        (Feature.CHECKPOINT_FORMAT_V2, "4.0"),
        (Feature.OFFLINE_REPARTITION, "4.2"),
        (Feature.OFFSET_LOG_V2, "4.2"),
        (Feature.COMMIT_LOG_V3, "4.2"),
        (Feature.MERGE_OPERATOR_V2, "4.2"),
        (Feature.JOIN_STATE_V4, "4.2"),
    ],
)
def test_features_found_in_sparks_own_code(feature: Feature, first: str) -> None:
    for version, release in releases().items():
        expected = tuple(int(p) for p in version.split(".")[:2]) >= tuple(int(p) for p in first.split("."))
        assert (feature in release.features) is expected, (feature, version)


def test_wasb_goes_with_hadoop_3_5() -> None:
    # Hadoop 3.5.0's hadoop-azure keeps a NativeAzureFileSystem that only throws "no longer supported".
    assert [v for v in releases() if not has(Feature.WASB, v)] == [v for v in releases() if hadoop_of(v) == "3.5.0"]
    assert lacking(Feature.WASB, "4.2.1") == f"{Feature.WASB} is not in Spark 4.2.1: it was removed after Spark 4.1"


def test_a_missing_feature_is_one_line_naming_the_line_that_has_it() -> None:
    message = lacking(Feature.TRANSFORM_WITH_STATE_PANDAS, "3.5.9")
    assert message == "transformWithStateInPandas needs Spark 4.0 or newer (installed: Spark 3.5.9)"
    assert lacking(Feature.TRANSFORM_WITH_STATE_PANDAS, "4.0.0") is None
    with pytest.raises(
        EnvironmentProblem, match=r"^Spark's own offline state repartition .* needs Spark 4\.2 or newer"
    ):
        require(Feature.OFFLINE_REPARTITION, "4.1.1")


def test_unknown_patch_and_newer_line_and_too_old() -> None:
    assert hadoop_of("4.1.9") == release_of(LINES["4.1"].newest).hadoop  # a patch newer than the table: its line's
    assert has(Feature.OFFLINE_REPARTITION, "4.4.0")  # a newer line keeps what the newest one has
    with pytest.raises(EnvironmentProblem, match=r"Spark 3\.4\.1 is older than tidemark supports"):
        line_of("3.4.1")


def test_python_newer_than_the_release_supports() -> None:
    assert python_problem("3.5.9", "3.11") is None
    assert python_problem("3.5.9", "3.12") == (
        "Spark 3.5.9 supports Python 3.8 to 3.11 (installed: Python 3.12): use Python 3.11; "
        "Spark 4.0 or newer runs on Python 3.12"
    )
    assert python_problem("4.3.0", "3.10") is None  # pip itself refuses older Pythons (Requires-Python)


def test_protobuf_for_transform_with_state() -> None:
    assert protobuf_problem("3.5.9", "3.20.0") is None  # no transformWithStateInPandas there
    assert protobuf_problem("4.0.5", "5.29.5") is None
    assert protobuf_problem("4.0.5", "6.33.5") is None  # one major newer than the generated code: allowed
    assert protobuf_problem("4.1.1", "5.29.5") == (
        "transformWithStateInPandas on Spark 4.1.1 needs protobuf 6.33.0 up to 7.x (installed: 5.29.5): "
        "pip install 'protobuf>=6.33.0,<7'"
    )


def test_jar_coordinates_follow_the_patch() -> None:
    assert coordinates(JarFeature.AZURE, "4.0.0") == ["org.apache.hadoop:hadoop-azure:3.4.1"]
    assert kafka_package("3.5.2") == "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.2"
    lock = jars.packaged_lock()
    for version in releases():
        for feature in (JarFeature.AZURE, JarFeature.AWS):
            assert jars.lock_key(feature, version) in lock, (feature, version)


# Spark's version, read anywhere but spark/lines.py, is a version question asked on the side.
STRAGGLERS = re.compile(r"pyspark\.__version__|\bspark(Context)?\.version\b|sparkContext\.version|SPARK_VERSION")


def test_no_version_question_outside_lines() -> None:
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "lines.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if STRAGGLERS.search(line)
    ]
    assert found == []
