"""Checkpoint-mode advice on the recorded logs (local[2], 8 state partitions) and on crafted boundary logs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tidemark.config.model import StateStoreKind
from tidemark.errors import InputError
from tidemark.sizing.load import ConfOverrides
from tidemark.sizing.planner import advise_checkpoint_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"
LOCAL_2 = ConfOverrides(cores=2)  # the recorded runs had two task slots


def _progress(name: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    return [line["progress"] for line in lines if line["type"] == "progress"]


def _expected_share(name: str, slots: int) -> tuple[float, float]:
    """Commit share and mean batch time without commit, computed straight from the JSON (first batch skipped)."""
    batches = _progress(name)[1:]
    commit = [
        sum(op["commitTimeMs"] / min(op["numShufflePartitions"], slots) for op in p["stateOperators"]) for p in batches
    ]
    durations = [p["batchDuration"] for p in batches]
    without = [d - c for d, c in zip(durations, commit, strict=True)]
    return sum(commit) / sum(durations), sum(without) / len(without)


def test_rocksdb_without_changelog_gets_changelog_advice() -> None:
    advice = advise_checkpoint_log(FIXTURES / "rocksdb.jsonl", overrides=LOCAL_2)
    share, without = _expected_share("rocksdb.jsonl", 2)
    assert advice.state_store is StateStoreKind.ROCKSDB
    assert advice.changelog_checkpointing is False
    assert advice.batches_analysed == len(_progress("rocksdb.jsonl")) - 1
    assert advice.commit_share == pytest.approx(share)
    assert share > 0.25
    assert advice.expected_batch_ms_without_commit == pytest.approx(without)
    assert [f.code for f in advice.findings] == ["COMMIT_SHARE_HIGH"]
    assert advice.recommendation == "rocksdb+changelog"


def test_changelog_run_is_recognised_and_commits_less() -> None:
    advice = advise_checkpoint_log(FIXTURES / "rocksdb_changelog.jsonl", overrides=LOCAL_2)
    share, _ = _expected_share("rocksdb_changelog.jsonl", 2)
    assert advice.changelog_checkpointing is True
    assert advice.commit_share == pytest.approx(share)
    without = advise_checkpoint_log(FIXTURES / "rocksdb.jsonl", overrides=LOCAL_2)
    assert advice.mean_commit_ms < without.mean_commit_ms
    assert "COMMIT_SHARE_HIGH" not in {f.code for f in advice.findings}


def test_hdfs_run_with_small_state_keeps_its_mode() -> None:
    advice = advise_checkpoint_log(FIXTURES / "hdfs.jsonl", overrides=LOCAL_2)
    share, _ = _expected_share("hdfs.jsonl", 2)
    assert advice.state_store is StateStoreKind.HDFS
    assert advice.commit_share == pytest.approx(share)
    assert share < 0.25
    assert advice.recommendation == "keep"


def test_without_slots_every_task_is_assumed_to_run_at_once() -> None:
    advice = advise_checkpoint_log(FIXTURES / "rocksdb.jsonl")
    share, _ = _expected_share("rocksdb.jsonl", 10**6)
    assert advice.task_slots is None
    assert advice.commit_share == pytest.approx(share)


def _crafted(tmp_path: Path, commit_ms: int, duration_ms: int, memory: int, partitions: int = 1) -> Path:
    """Two copies of a recorded HDFS batch (the first is skipped as warm-up) with the figures under test."""
    template = _progress("hdfs.jsonl")[3]
    lines = []
    for batch_id in (0, 1):
        progress = copy.deepcopy(template)
        progress["batchId"] = batch_id
        progress["batchDuration"] = duration_ms
        operator = progress["stateOperators"][0]
        operator.update(commitTimeMs=commit_ms, memoryUsedBytes=memory, numShufflePartitions=partitions)
        lines.append(
            json.dumps({"type": "progress", "time": progress["timestamp"], "run_id": "r", "progress": progress})
        )
    log = tmp_path / "crafted.jsonl"
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.parametrize(("commit_ms", "high"), [(249, False), (250, True)])
def test_commit_share_boundary_is_25_percent(tmp_path: Path, commit_ms: int, high: bool) -> None:
    advice = advise_checkpoint_log(_crafted(tmp_path, commit_ms, 1000, 0))
    assert advice.commit_share == commit_ms / 1000
    assert ("COMMIT_SHARE_HIGH" in {f.code for f in advice.findings}) is high
    assert advice.expected_batch_ms_without_commit == 1000 - commit_ms


def test_commit_time_is_divided_over_parallel_tasks(tmp_path: Path) -> None:
    # 800 ms summed over 4 tasks on 2 slots: two waves of 200 ms each, 400 ms of a 1000 ms batch
    advice = advise_checkpoint_log(_crafted(tmp_path, 800, 1000, 0, partitions=4), overrides=LOCAL_2)
    assert advice.mean_commit_ms == 400
    assert advice.recommendation == "rocksdb+changelog"


# 1g heap: unified = (1024 - 300) MB x 0.6 = 455501414.4 bytes; state from half of it dominates.
HALF_UNIFIED_1G = 455501414.4 / 2


@pytest.mark.parametrize(("memory", "dominates"), [(int(HALF_UNIFIED_1G), False), (int(HALF_UNIFIED_1G) + 1, True)])
def test_state_memory_dominates_boundary_recommends_rocksdb(tmp_path: Path, memory: int, dominates: bool) -> None:
    advice = advise_checkpoint_log(_crafted(tmp_path, 10, 1000, memory), overrides=ConfOverrides(executor_memory="1g"))
    assert advice.state_memory_share == pytest.approx(memory / 455501414.4)
    assert ("STATE_MEMORY_DOMINATES" in {f.code for f in advice.findings}) is dominates
    assert advice.recommendation == ("rocksdb" if dominates else "keep")


def test_rocksdb_state_never_triggers_the_heap_finding(tmp_path: Path) -> None:
    log = _crafted(tmp_path, 10, 1000, 10**9)
    advice = advise_checkpoint_log(log, overrides=ConfOverrides(state_store=StateStoreKind.ROCKSDB))
    assert "STATE_MEMORY_DOMINATES" not in {f.code for f in advice.findings}


def test_log_without_state_is_an_input_error(tmp_path: Path) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_text(json.dumps({"type": "started", "time": "2026-01-01T00:00:00.000Z"}) + "\n")
    with pytest.raises(InputError):
        advise_checkpoint_log(log)
