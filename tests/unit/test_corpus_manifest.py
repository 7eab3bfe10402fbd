"""The checkpoint corpus (tests/fixtures/corpus) is complete and consistent with itself; no Spark needed.

Every Spark line's folder holds every case the recorder has for that line, each with expected.json whose figures
agree with the files present: the version with the folder, the batches with offsets/ and commits/, the operators
and stores with state/. See tests/fixtures/corpus/README.md.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
RECORDED_LINES = ("3.1.3", "3.3.4", "3.5.9", "4.0.5", "4.1.4", "4.2.1", "4.3.0")
SYNTHESIZED = {"2.4.8": ("hdfs_dedup", "hdfs_window")}
MAX_CORPUS_BYTES = 15 * 1024 * 1024


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_corpus", REPO / "tools" / "spark_lines" / "record_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _case_folders() -> list[Path]:
    return sorted(case for line in CORPUS.glob("spark-*") if line.is_dir() for case in line.iterdir() if case.is_dir())


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


CASES = _case_folders()


def test_every_line_has_every_case_the_recorder_has_for_it() -> None:
    recorder = _recorder()
    for version in RECORDED_LINES:
        wanted = {case.name for case in recorder.cases_for(version)}
        present = {p.name for p in (CORPUS / f"spark-{version}").iterdir() if p.is_dir()}
        assert present == wanted, version
    for version, cases in SYNTHESIZED.items():
        assert sorted(p.name for p in (CORPUS / f"spark-{version}").iterdir() if p.is_dir()) == list(cases)
    assert sorted(p.name.removeprefix("spark-") for p in CORPUS.glob("spark-*")) == sorted(
        [*RECORDED_LINES, *SYNTHESIZED]
    )


def test_corpus_stays_small() -> None:
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert total < MAX_CORPUS_BYTES


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_expected_json_matches_the_checkpoint(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    checkpoint = case / "checkpoint"
    assert f"spark-{expected['spark_version']}" == case.parent.name
    assert expected["case"] == case.name
    assert (checkpoint / "metadata").is_file()
    offsets, commits = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
    assert expected["offsets_batches"] == offsets
    assert expected["commits_batches"] == commits
    assert expected["last_committed_batch"] == commits[-1] == offsets[-1]
    assert expected["last_committed_batch_source"]
    first_line = (checkpoint / "commits" / str(commits[-1])).read_text().splitlines()[0]
    format_version = expected["settings"].get("spark.sql.streaming.stateStore.checkpointFormatVersion", "1")
    sinks_named = expected["settings"].get("spark.sql.streaming.queryEvolution.enableSinkEvolution") == "true"
    assert first_line == ("v3" if sinks_named else "v2" if format_version == "2" else "v1")
    offsets_version = expected["settings"].get("spark.sql.streaming.offsetLog.formatVersion", "1")
    assert (checkpoint / "offsets" / str(offsets[-1])).read_text().splitlines()[0] == f"v{offsets_version}"


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_operators_and_stores_are_on_disk_with_sourced_figures(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    state = case / "checkpoint" / "state"
    assert expected["operators"]
    for operator in expected["operators"]:
        operator_dir = state / str(operator["operator_id"])
        partitions = [p for p in operator_dir.iterdir() if p.name.isdigit()]
        assert partitions, operator_dir
        assert isinstance(operator["num_rows_total"], int)
        assert operator["num_rows_total_source"]
        families = "useVirtualColumnFamilies" in json.dumps(expected.get("state_metadata"))
        for store in operator["stores"]:
            assert store.get("rows_source") or store.get("state_variables"), store
            if families:  # join state format 3+: the stores are column families of `default`, no folders
                assert not any((p / store["name"]).exists() for p in partitions), store["name"]
            elif store["name"] != "default":
                assert all((p / store["name"]).is_dir() for p in partitions), store["name"]
            for variable in store.get("state_variables", []):
                assert variable["rows_source"]
    if len(expected["operators"]) == 1 and len(expected["operators"][0]["stores"]) == 1:
        store = expected["operators"][0]["stores"][0]
        if isinstance(store.get("rows"), int):  # one store: Spark's reader and its progress event agree
            assert store["rows"] == expected["operators"][0]["num_rows_total"]


def test_state_schema_files_only_from_spark_3() -> None:
    for case in CORPUS.glob("spark-2.*/*"):
        assert not list((case / "checkpoint").rglob("schema")), case
        proof = json.loads((case / "proof.json").read_text())
        assert proof["delta_records_equal_spark_3_5_9_recording"] is True
        assert proof["continued_with"]["output_equals_pandas_oracle"] is True


def test_long_runs_were_cleaned_by_spark() -> None:
    long_runs = list(CORPUS.glob("spark-*/*long_run"))
    assert long_runs
    for case in long_runs:
        expected = json.loads((case / "expected.json").read_text())
        retain = int(expected["settings"]["spark.sql.streaming.minBatchesToRetain"])
        assert expected["last_committed_batch"] >= 25
        assert expected["offsets_batches"][0] > 0
        assert len(expected["commits_batches"]) <= retain + 1
