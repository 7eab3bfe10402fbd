"""Issues #38 and #55: sources behind one contract (tidemark.sources): every format has exactly one Source, each
answers what the pipeline and the tools ask without a JVM, and nothing outside sources/ (and config/) branches on
the source's format or asks which connector class it holds (optional capabilities are asked instead)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

import tidemark
from tests.helpers import write_config
from tidemark.compat import UTC
from tidemark.config import SourceFormat, TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.errors import UsageError
from tidemark.formats import Checkpoint
from tidemark.needs import needs_of
from tidemark.recovery.replay import check_replayable
from tidemark.sources import (
    SOURCES,
    CatchesUp,
    FilePosition,
    FileSource,
    KafkaSource,
    RateSource,
    Replayable,
    ReportsLag,
    source_of,
)
from tidemark.spark.artifacts import JarFeature

SRC = Path(tidemark.__file__).parent
CORPUS = Path(__file__).parents[1] / "fixtures" / "corpus" / "spark-4.1.4" / "hdfs_window" / "checkpoint"

# A branch on the source's format: `SourceFormat.X`, the config's format read, or its family tested (`is_kafka`,
# `is_file` as a property, not pathlib's `is_file()`), or an isinstance on a connector's class or plan, outside
# sources/ and config/.
SOURCE_BRANCH = re.compile(
    r"SourceFormat\.\w+|source\.format\b|\.is_kafka\b|\.is_file\b(?!\()|KAFKA_FORMATS"
    r"|isinstance\(.*\b(Kafka|File|Rate)\w*(Source|Plan)\b"
)
OWN_PACKAGES = ("sources", "config")


def test_no_branch_on_the_source_format_outside_its_package() -> None:
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] not in OWN_PACKAGES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SOURCE_BRANCH.search(line)
    ]
    assert found == []


def test_the_grep_sees_a_branch() -> None:
    branches = [
        "if config.source.is_kafka:",
        "if config.source.format is SourceFormat.RATE:",
        "jars = {JarFeature.KAFKA} if source.is_file else set()",
        "if isinstance(plan, KafkaCatchUpPlan):",
        "if isinstance(source_of(config), (FileSource, KafkaSource)):",
    ]
    assert all(SOURCE_BRANCH.search(line) for line in branches)
    assert not SOURCE_BRANCH.search("if not path.is_file():")
    assert not SOURCE_BRANCH.search("if isinstance(source, Replayable):")  # a capability, not a connector


def test_every_source_format_has_exactly_one_source() -> None:
    owners = [f for cls in (FileSource, KafkaSource, RateSource) for f in cls.formats]
    assert sorted(owners) == sorted(SourceFormat) and len(owners) == len(set(owners))
    assert set(SOURCES) == set(SourceFormat)


def _config(tmp_path: Path, fmt: str) -> TidemarkConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    keys: dict[str, object] = {"format": fmt}
    if fmt == "kafka":
        keys |= {"path": None, "bootstrap_servers": "localhost:9092", "topic": "events", "max_files_per_trigger": None}
    if fmt == "rate":
        keys |= {"path": None, "max_files_per_trigger": None}
    return load_config(write_config(tmp_path, source=keys))


def test_each_source_declares_what_a_session_and_the_tools_need(tmp_path: Path) -> None:
    files, kafka, rate = (_config(tmp_path / f, f) for f in ("json", "kafka", "rate"))
    assert needs_of(files).jars == frozenset() and not needs_of(files).helper
    assert JarFeature.KAFKA in needs_of(kafka).jars and needs_of(kafka).helper
    assert not needs_of(kafka, helper=False).helper
    # The optional capabilities each source has (callers ask these, never the connector's class).
    sources = [source_of(c) for c in (files, kafka, rate)]
    assert [isinstance(s, CatchesUp) for s in sources] == [True, True, False]
    assert [isinstance(s, Replayable) for s in sources] == [True, True, False]
    assert [isinstance(s, ReportsLag) for s in sources] == [False, True, False]
    assert source_of(kafka).origin_names_record and not source_of(files).origin_names_record
    assert not source_of(rate).malformed and source_of(files).malformed
    with pytest.raises(UsageError, match="the rate source cannot be replayed"):
        check_replayable(PipelineContext.of(rate))


def test_file_inputs_of_committed_batches_are_the_source_logs_files(tmp_path: Path) -> None:
    config = _config(tmp_path, "json")
    checkpoint = Checkpoint.open(str(CORPUS))
    inputs = source_of(config).committed_inputs(checkpoint, [0, 1, 2, 3])
    # Read independently: each source-log entry names its file and the batch of the source log it belongs to;
    # batch N of the query read the entries after its predecessor's logOffset up to its own.
    listed: dict[int, list[str]] = {}
    for entry in sorted((CORPUS / "sources" / "0").glob("[0-9]*"), key=lambda p: int(p.name)):
        lines = entry.read_text().splitlines()[1:]
        listed[int(entry.name)] = [json.loads(line)["path"] for line in lines]
    offsets = {
        int(p.name): json.loads(p.read_text().splitlines()[-1])["logOffset"]
        for p in (CORPUS / "offsets").glob("[0-9]*")
    }
    for batch, got in inputs.items():
        first = offsets[batch - 1] + 1 if batch > 0 else 0
        expected = [f for i in range(first, offsets[batch] + 1) for f in listed.get(i, [])]
        assert list(got.names) == expected and got.names
    assert set(inputs) == {b for b in range(4) if (offsets[b] > offsets.get(b - 1, -1))}


def test_a_file_position_refuses_files_outside_or_gone(tmp_path: Path) -> None:
    resume = datetime(2026, 3, 1, tzinfo=UTC)
    landing = str(tmp_path / "landing")
    assert FilePosition(3, (), (), 1, landing).refusal(resume) is None
    outside = FilePosition(3, (), ("/elsewhere/a.json",), 0, landing).refusal(resume)
    assert outside is not None and "outside [source] path" in outside and "/elsewhere/a.json" in outside
    gone = FilePosition(3, ("/l/b.json",), (), 0, landing).refusal(resume)
    assert gone is not None and "are gone" in gone and resume.isoformat() in gone


def test_replays_are_described_by_their_source(tmp_path: Path) -> None:
    resume = datetime(2026, 3, 1, tzinfo=UTC)
    files, kafka = _config(tmp_path / "f", "json"), _config(tmp_path / "k", "kafka")
    assert source_of(files).describe_replay(resume, None).startswith(f"every landing file in {files.source.path}")
    assert source_of(kafka).describe_replay(resume, None).startswith("Kafka topic 'events'")
    assert source_of(files).replay_config('{"events":{"0":1}}') == files  # a landing folder is replayed whole
    replayed = source_of(kafka).replay_config('{"events":{"0":1}}')
    assert replayed.source.starting_offsets == '{"events":{"0":1}}'
    assert source_of(kafka).replay_config(None).source.starting_offsets == "earliest"
