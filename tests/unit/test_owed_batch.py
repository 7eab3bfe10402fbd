"""The no-data batch a stopped query owed: planned from offsets/commits as Spark wrote them, nothing else touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.formats import Checkpoint, OffsetEntry, rewrite_offset_watermark
from tidemark.pipeline.owed_batch import plan_owed_batch

DELAY = 600_000  # a 10-minute watermark
CONF = '"conf":{"spark.sql.shuffle.partitions":"4"}'


def _offsets(watermark: int, kafka: dict[str, int], timestamp: int = 1) -> str:
    meta = f'{{"batchWatermarkMs":{watermark},"batchTimestampMs":{timestamp},{CONF}}}'
    return f"v1\n{meta}\n{json.dumps({'t': kafka}, separators=(',', ':'))}"


def _checkpoint(tmp_path: Path, batches: list[tuple[int, dict[str, int]]], commits: list[int | None]) -> Path:
    """offsets/<i> from batches (watermark, offsets); commits/<i> with nextBatchWatermarkMs (None: not committed)."""
    root = tmp_path / "checkpoint"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, (watermark, kafka) in enumerate(batches):
        (root / "offsets" / str(batch)).write_text(_offsets(watermark, kafka, timestamp=batch))
    for batch, next_watermark in enumerate(commits):
        if next_watermark is not None:
            (root / "commits" / str(batch)).write_text(f'v1\n{{"nextBatchWatermarkMs":{next_watermark}}}')
    return root


def test_a_committed_batch_that_moved_the_watermark_owes_a_no_data_batch(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path, [(0, {"0": 5}), (1000, {"0": 9})], [1000, 7000])
    before = (root / "offsets" / "1").read_text()

    owed = plan_owed_batch(Checkpoint.open(str(root)), DELAY, now_ms=123)

    assert owed is not None and (owed.batch, owed.after, owed.watermark_ms) == (2, 1, 7000)
    assert owed.previous_watermark_ms == 1000 and not owed.recomputed
    planned = OffsetEntry.parse(2, (root / "offsets" / "2").read_text())
    kept = OffsetEntry.parse(1, before)
    # The same source offsets (no new data) and conf; the committed watermark; the time of planning.
    assert planned.source_offsets == kept.source_offsets and planned.conf == kept.conf
    assert (planned.watermark_ms, planned.timestamp_ms) == (7000, 123)
    assert (root / "offsets" / "1").read_text() == before
    assert not (root / "commits" / "2").exists()
    # Planned once: the next start finds batch 2 planned and not committed (Spark runs it).
    assert plan_owed_batch(Checkpoint.open(str(root)), DELAY) is None


@pytest.mark.parametrize(
    ("commits", "why"),
    [
        ([1000, None], "the newest batch is not committed: Spark re-runs it itself"),
        ([1000, 1000], "the watermark did not move"),
        ([], "nothing committed"),
    ],
)
def test_nothing_is_owed(tmp_path: Path, commits: list[int | None], why: str) -> None:
    root = _checkpoint(tmp_path, [(0, {"0": 5}), (1000, {"0": 9})], commits)
    assert plan_owed_batch(Checkpoint.open(str(root)), DELAY, newest_event_ms=lambda b: None) is None, why
    assert sorted(p.name for p in (root / "offsets").iterdir()) == ["0", "1"]


def test_a_stale_committed_watermark_is_computed_again_from_the_batch_input(tmp_path: Path) -> None:
    # Batch 1 read data (offsets moved) and committed the watermark it started with: a re-run the sink skipped.
    root = _checkpoint(tmp_path, [(0, {"0": 5}), (1000, {"0": 9})], [1000, 1000])
    asked: list[int] = []

    def newest(batch: int) -> int:
        asked.append(batch)
        return 50_000

    owed = plan_owed_batch(Checkpoint.open(str(root)), DELAY // 100, newest)

    assert asked == [1]
    assert owed is not None and owed.recomputed and owed.watermark_ms == 50_000 - DELAY // 100
    assert OffsetEntry.parse(2, (root / "offsets" / "2").read_text()).watermark_ms == 50_000 - DELAY // 100


def test_the_input_is_read_again_only_for_a_data_batch_that_left_the_watermark_and_never_backwards(
    tmp_path: Path,
) -> None:
    asked: list[int] = []

    def newest(batch: int) -> int:
        asked.append(batch)
        return 1500  # minus the delay: behind the committed watermark

    # A no-data batch (offsets as the batch before's) leaves the watermark by design: nothing is read.
    root = _checkpoint(tmp_path / "a", [(0, {"0": 5}), (1000, {"0": 5})], [1000, 1000])
    assert plan_owed_batch(Checkpoint.open(str(root)), DELAY, newest) is None and asked == []
    # A data batch whose events were all older: read, and the watermark does not go back.
    root = _checkpoint(tmp_path / "b", [(0, {"0": 5}), (1000, {"0": 9})], [1000, 1000])
    assert plan_owed_batch(Checkpoint.open(str(root)), 1000, newest) is None and asked == [1]
    # The batch before's entry is gone: what batch 1 read is unknown, and nothing is read from the source's start.
    (root / "offsets" / "0").unlink()
    assert plan_owed_batch(Checkpoint.open(str(root)), 1000, newest) is None and asked == [1]


def test_a_batch_planned_by_another_writer_first_is_kept(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path, [(0, {"0": 5}), (1000, {"0": 9})], [1000, 7000])
    theirs = _offsets(7000, {"0": 12})
    (root / "offsets" / "2").write_text(theirs)
    # Batch 2 is planned and not committed: nothing is owed, nothing is overwritten.
    assert plan_owed_batch(Checkpoint.open(str(root)), DELAY) is None
    assert (root / "offsets" / "2").read_text() == theirs


def test_rewrite_offset_watermark_keeps_every_other_line() -> None:
    text = 'v1\n{"batchWatermarkMs":5,"batchTimestampMs":9,"conf":{"a":"b"}}\n{"logOffset":3}\n-\n'
    out = rewrite_offset_watermark(text, 70, 80)
    assert out.splitlines()[0] == "v1" and out.splitlines()[2:] == ['{"logOffset":3}', "-"]
    assert json.loads(out.splitlines()[1]) == {"batchWatermarkMs": 70, "batchTimestampMs": 80, "conf": {"a": "b"}}
    assert out.endswith("\n")
    with pytest.raises(ValueError, match="metadata line"):
        rewrite_offset_watermark("v1\n\n{}", 1, 2)  # Spark before 2.1: no metadata to carry a watermark
