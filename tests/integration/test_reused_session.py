"""A running session (a notebook's) lent to a tidemark command: the command's settings last only while it runs,
and nothing is fetched for a JVM that is already started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.needs import kafka_session

pytestmark = [pytest.mark.integration]


def test_kafka_offsets_on_a_running_session_fetch_no_jar_and_give_its_settings_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fetch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a jar fetched for a JVM that is already running")

    monkeypatch.setattr("tidemark.spark.environment.fetch", no_fetch)
    config = load_config(write_config(tmp_path))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    assert before != "1"
    with kafka_session(config) as session:
        assert session is spark
        assert session.conf.get("spark.sql.shuffle.partitions") == "1"
    assert spark.conf.get("spark.sql.shuffle.partitions") == before


def test_a_running_session_without_a_connector_the_command_needs_says_which(
    spark: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidemark.spark import environment
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.environment import SessionNeeds, spark_session

    needs = SessionNeeds(remote=None, jars=frozenset({JarFeature.KAFKA, JarFeature.AZURE, JarFeature.AWS}))
    with caplog.at_level("WARNING", logger="tidemark.spark.environment"):
        # The test session started with all three connectors: each marker class is found in its JVM.
        with spark_session(needs) as session:
            assert session is spark
        assert not caplog.records
        # One class its classpath does not have stands for a session started without hadoop-azure.
        absent = {**environment.MARKER_CLASSES, JarFeature.AZURE: "org.example.tidemark.NoSuchFileSystem"}
        monkeypatch.setattr(environment, "MARKER_CLASSES", absent)
        with spark_session(needs) as session:
            assert session is spark
    (record,) = caplog.records
    message = record.getMessage()
    assert "without the jars of azure (org.example.tidemark.NoSuchFileSystem)" in message, message
    assert "kafka" not in message and "aws" not in message, message


@pytest.mark.parametrize(
    ("sink", "module", "marker", "says"),
    [
        ({"format": "delta", "path": "output"}, "tidemark.sinks.delta.sink", "EXTENSION", "no Delta Lake jars"),
        (
            {
                "format": "iceberg",
                "path": None,
                "table": "lake.clicks",
                "catalog": {"type": "hadoop", "warehouse": "wh"},
            },
            "tidemark.sinks.iceberg.sink",
            "CATALOG_CLASS",
            "no Apache Iceberg jar",
        ),
    ],
    ids=["delta", "iceberg"],
)
def test_a_running_session_without_the_sink_s_jars_is_refused_in_one_line_before_the_query_starts(
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sink: dict[str, Any],
    module: str,
    marker: str,
    says: str,
) -> None:
    from tidemark.cli.main import main
    from tidemark.pipeline.generate import generate_events

    # The test session has both sinks' jars; a class its classpath does not have stands for a notebook's session
    # started without them (the sink looks its class up in the session's JVM, as with a real missing jar).
    monkeypatch.setattr(f"{module}.{marker}", "org.example.tidemark.NoSuchSinkClass")
    generate_events(tmp_path / "landing", events=20, keys=4, files=1, seed=3)
    config = write_config(tmp_path, sink=sink)
    capsys.readouterr()
    code = main(["run", str(config), "--available-now"])
    err = capsys.readouterr().err
    assert code != 0
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0] and "tidemark jars list" in errors[0], err
    assert "Traceback" not in err
    # Refused before Spark started the query: no batch in the checkpoint, nothing in the sink's place.
    for log in ("offsets", "commits"):
        assert not (tmp_path / "checkpoint" / log).exists() or not any((tmp_path / "checkpoint" / log).iterdir())
    assert not (tmp_path / "output").exists() and not (tmp_path / "wh").exists()
