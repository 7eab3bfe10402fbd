"""The quarantine writer of one batch: the stream's own count decides how it reads the input again (a Kafka
catch-up's end to end was half this re-read, BENCHMARKS.md), and a wrong count never loses a record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemark.pipeline import quarantine
from tidemark.pipeline.quarantine import iter_quarantine, write_malformed

pytestmark = [pytest.mark.integration]

LIMIT = 5


def _frame(spark: Any, rows: int) -> Any:
    """rows malformed records in the written layout, in 4 input partitions (no shuffle: like a Kafka range read)."""
    data = [(7, f"topic/0/{i}", "unparseable record", f"bad {i}", "2026-01-01T00:00:00Z") for i in range(rows)]
    schema = "batch_id long, source string, reason string, raw string, quarantined_at string"
    return spark.createDataFrame(spark.sparkContext.parallelize(data, 4), schema)


def _jobs(spark: Any, group: str, write: Any) -> tuple[Any, int]:
    """What write returned and how many Spark jobs it ran."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = write()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


@pytest.fixture(autouse=True)
def _small_driver_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quarantine, "DRIVER_LIMIT", LIMIT)


def test_a_counted_batch_that_fits_is_collected_in_one_job(spark: Any, tmp_path: Path) -> None:
    frame = _frame(spark, 3)
    counted, jobs = _jobs(spark, "q-counted", lambda: write_malformed(frame, str(tmp_path / "a"), 7, expected=3))
    unknown, jobs_unknown = _jobs(spark, "q-unknown", lambda: write_malformed(frame, str(tmp_path / "b"), 7))
    assert counted.count == unknown.count == 3
    assert jobs == 1  # every partition at once
    assert jobs_unknown > 1  # Spark's take: one partition first, then the rest
    assert sorted(r["raw"] for r in iter_quarantine(str(tmp_path / "a"))) == ["bad 0", "bad 1", "bad 2"]


def test_a_counted_batch_too_large_for_the_driver_goes_to_the_executors_without_a_collect(
    spark: Any, tmp_path: Path
) -> None:
    frame = _frame(spark, 20)
    counted, jobs = _jobs(spark, "q-large", lambda: write_malformed(frame, str(tmp_path / "a"), 7, expected=20))
    unknown, jobs_unknown = _jobs(spark, "q-large-unknown", lambda: write_malformed(frame, str(tmp_path / "b"), 7))
    assert counted.count == unknown.count == 20
    assert jobs < jobs_unknown  # the collect that only found the batch too large is gone
    assert sorted(r["raw"] for r in iter_quarantine(str(tmp_path / "a"))) == sorted(f"bad {i}" for i in range(20))


def test_a_count_below_what_the_input_now_holds_loses_nothing(spark: Any, tmp_path: Path) -> None:
    # The input grew after the stream counted it (a file rewritten in place): every record still reaches the folder.
    result = write_malformed(_frame(spark, 20), str(tmp_path / "q"), 7, expected=3)
    assert result.count == 20
    assert len(list(iter_quarantine(str(tmp_path / "q")))) == 20
