"""Smoke: `state repartition` of join state format 4, on whatever Spark this runs on.

Join state format 4 exists from Spark 4.2 on (its timestamp key encoders are 4.2's). There: the join v4 checkpoints
Spark 4.2.1 and 4.3.0 recorded (tests/fixtures/corpus) move 2 -> 3 with Spark's reader giving the same rows before
and after (repartition's own verification), as many as Spark counted when it wrote them, and stay in format 4; then
a join this Spark runs in format 4 (checkpoint format v2, as the join v3 test of tests/integration does) moves
3 -> 2, restarts on it with rows that must find moved ones, and equals the pandas join of every event. Elsewhere:
one line naming the Spark that has it, the checkpoint left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.streaming_queries import ROCKSDB, assert_join_output_matches_pandas, join, run_query, write_input
from tidemark.cli.main import main
from tidemark.evolve.repartition import repartition_checkpoint
from tidemark.formats import JOIN_V4_STORES, Checkpoint, store_schemas
from tidemark.session import runtime_conf
from tidemark.spark.lines import Feature, lacking

pytestmark = [pytest.mark.integration]
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
RECORDED = ("spark-4.2.1/rocksdb_join_v4", "spark-4.3.0/rocksdb_join_v4")
JOIN_FORMAT_KEY = "spark.sql.streaming.join.stateFormatVersion"
JOIN_FORMAT = {JOIN_FORMAT_KEY: "4", "spark.sql.streaming.join.stateFormatV4.enabled": "true"}
V2_ROCKSDB = (ROCKSDB, "true", "2", "true")  # changelog checkpointing, checkpoint format v2


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _in_minute_order(folder: Path) -> None:
    """The file source reads files by modification time: one minute per file, in order, so none is late."""
    for index, file in enumerate(sorted(folder.glob("m*.json"))):
        os.utime(file, (1_700_000_000 + index, 1_700_000_000 + index))


def _moves_recorded(case: str, tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(CORPUS / case / "checkpoint", old)
    expected = json.loads((CORPUS / case / "expected.json").read_text())
    report = repartition_checkpoint(str(old), 3, apply=True, to=str(new))
    assert report.verification is not None and report.verification.same, report.verification
    assert report.verification.partitions_after.get(0) == 3
    # Spark's reader after the move counts, per family, what it counted when Spark wrote the checkpoint.
    rows = {t.target: (t.rows_before, t.rows_after) for t in report.verification.targets}
    assert rows == {s["name"]: (s["rows"], s["rows"]) for s in expected["operators"][0]["stores"]}
    batch = expected["last_committed_batch"]
    moved = Checkpoint.open(str(new))
    assert moved.offset(batch).conf["spark.sql.shuffle.partitions"] == "3"
    assert moved.offset(batch).conf[JOIN_FORMAT_KEY] == "4"
    assert {f.name for f in store_schemas(moved, 0)} == set(JOIN_V4_STORES)  # still format 4's four families
    assert sorted(p.name for p in (new / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1", "2"]


def _continues(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, checkpoint, output = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    write_input(source, range(3))
    _in_minute_order(source)
    with runtime_conf(spark, {"spark.sql.shuffle.partitions": "3", **JOIN_FORMAT}):
        run_query(spark, source, join, checkpoint, output, V2_ROCKSDB)
    batch = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert {f.name for f in store_schemas(Checkpoint.open(str(checkpoint)), 0)} == set(JOIN_V4_STORES)

    code, _, err = _cli(capsys, "state", "repartition", str(checkpoint), "--partitions", "2", "--apply")
    assert code == 0, err
    assert len(Checkpoint.open(str(checkpoint)).commit(batch).state_unique_ids[0]) == 2  # format v2 stays v2

    # Read first after the move: each key 5 s after a left row kept in the moved state, which it must find there.
    rows = [{"k": f"k{j}", "ts": f"2024-01-01T00:02:{j * 10 + 5:02d}Z", "v": 1000 + j} for j in range(3)]
    (source / "m002x.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_input(source, range(3, 6))
    _in_minute_order(source)
    with runtime_conf(spark, JOIN_FORMAT):  # as the user's session keeps it; 2 partitions, as recorded now
        run_query(spark, source, join, checkpoint, output, V2_ROCKSDB)
    latest = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert latest > batch
    assert Checkpoint.open(str(checkpoint)).offset(latest).conf["spark.sql.shuffle.partitions"] == "2"
    assert Checkpoint.open(str(checkpoint)).offset(latest).conf[JOIN_FORMAT_KEY] == "4"

    # 42 pairs: each event with itself, and the three added after the move with moved left rows.
    assert_join_output_matches_pandas(source, output, pairs_expected=42)


@pytest.mark.smoke("repartition join v4")
def test_join_state_format_4_repartitions_and_continues(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], refused: Callable[[str], None]
) -> None:
    missing = lacking(Feature.STATE_REWRITE) or lacking(Feature.JOIN_STATE_V4)
    if missing is not None:
        checkpoint = Path(shutil.copytree(CORPUS / RECORDED[0] / "checkpoint", tmp_path / "old"))
        before = _listing(checkpoint)
        code, _, err = _cli(capsys, "state", "repartition", str(checkpoint), "--partitions", "3", "--apply")
        assert code == 1, err
        lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and missing in lines[0] and "Traceback" not in err, err
        assert _listing(checkpoint) == before
        refused(lines[0])
        return
    for index, case in enumerate(RECORDED):
        _moves_recorded(case, tmp_path / str(index))
    _continues(spark, tmp_path / "continued", capsys)
