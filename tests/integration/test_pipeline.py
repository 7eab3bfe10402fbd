"""The main job end to end on the shared session, checked against the pandas oracle."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers import QUARANTINE_TIME, read_sink, write_config
from tests.oracles import assert_matches_oracle, count_malformed, window_oracle
from tidemark.config import load_config
from tidemark.formats import Checkpoint
from tidemark.formats import write_quarantine_marker as write_marker
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import batch_name, read_quarantine
from tidemark.pipeline.run import StopReason, run_pipeline

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("slide", [None, "5 minutes"], ids=["tumbling", "sliding"])
def test_output_equals_pandas_oracle(spark: object, tmp_path: Path, slide: str | None) -> None:
    data = generate_events(
        tmp_path / "landing", events=3000, keys=7, files=5, seed=11, late_fraction=0.03, malformed_fraction=0.02
    )
    config = load_config(write_config(tmp_path, aggregation={"slide": slide}))
    result = run_pipeline(config)

    assert result.stopped is StopReason.FINISHED
    expected = window_oracle(
        [[f] for f in data.files],
        window=timedelta(minutes=15),
        watermark=timedelta(minutes=10),
        slide=timedelta(minutes=5) if slide else None,
    )
    assert len(expected) > 20
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    # Spark's own reader (through the sink's metadata log) sees the same rows.
    spark_rows = spark.read.parquet(str(tmp_path / "output")).count()  # type: ignore[attr-defined]
    assert spark_rows == len(expected)
    assert result.input_rows == 3000 + data.malformed_lines


def test_malformed_lines_land_in_quarantine(spark: object, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "landing", events=800, keys=5, files=4, seed=3, malformed_fraction=0.05)
    config = load_config(write_config(tmp_path))
    result = run_pipeline(config)

    records = read_quarantine(str(tmp_path / "quarantine"))
    assert data.malformed_lines > 10
    assert len(records) == data.malformed_lines == count_malformed(data.files) == result.quarantined
    landing_lines = {ln for f in data.files for ln in f.read_text().splitlines()}
    for record in records:
        assert record["raw"] in landing_lines or record["reason"] != "unparseable record"
        assert record["source"].endswith(".json")
        assert isinstance(record["batch_id"], int)
        assert QUARANTINE_TIME.fullmatch(record["quarantined_at"]), record
    reasons = {r["reason"] for r in records}
    assert reasons == {"unparseable record", "missing or invalid event time", "missing key"}
    # The batch id of each record is the batch that read its file (one file per batch here).
    for record in records:
        assert record["source"].endswith(f"events-{record['batch_id']}.json")

    # A driver that died after batch 1 committed but before its records were written: the next
    # start re-reads that batch's files from the source log and writes them.
    (tmp_path / "quarantine" / batch_name(1)).unlink()
    (tmp_path / "quarantine" / batch_name(3)).unlink()
    write_marker(str(tmp_path / "quarantine"), 0)
    again = run_pipeline(config)
    assert again.input_rows == 0
    restored = read_quarantine(str(tmp_path / "quarantine"))
    key = ["batch_id", "source", "reason", "raw"]
    assert sorted(tuple(r[k] for k in key) for r in restored) == sorted(tuple(r[k] for k in key) for r in records)


def _files_per_batch_and_window(output: Path) -> dict[tuple[str, str], int]:
    """How many Parquet files each batch wrote into each windowStart folder, from the sink's metadata log."""
    import json
    from collections import Counter

    counts: Counter[tuple[str, str]] = Counter()
    for entry in sorted((output / "_spark_metadata").iterdir()):
        if not entry.name.isdigit():
            continue
        for line in entry.read_text().splitlines()[1:]:
            path = json.loads(line)["path"]
            counts[(entry.name, path.rsplit("/", 2)[-2])] += 1
    return dict(counts)


@pytest.mark.parametrize("writers", [None, 1], ids=["auto", "one"])
def test_writers_bound_the_files_each_batch_writes(spark: object, tmp_path: Path, writers: int | None) -> None:
    # 4 state partitions on the test session's 2 task slots: Spark's plan writes from up to 4 tasks.
    data = generate_events(tmp_path / "landing", events=3000, keys=7, files=5, seed=11, late_fraction=0.03)
    sink = {"writers": writers} if writers else {}
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 4}, sink=sink))
    run_pipeline(config)

    expected = window_oracle([[f] for f in data.files], window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    files = _files_per_batch_and_window(tmp_path / "output")
    assert max(files.values()) <= (writers or 2)  # auto: the session's 2 task slots
    assert len({w for _, w in files}) == len({row["windowStart"] for row in expected.to_dict("records")})


def test_checkpoint_from_before_writers_continues_with_them(
    spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint started by a release that wrote through Spark's own plan (no coalesce after the state
    # operator) restarts with the coalesced plan: the state carries over and no window is lost or doubled.
    from tidemark.pipeline import query

    staging = tmp_path / "staging"
    data = generate_events(staging, events=3000, keys=7, files=6, seed=21, late_fraction=0.03)
    landing = tmp_path / "landing"
    landing.mkdir()
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 4}))
    for file in data.files[:3]:
        file.rename(landing / file.name)
    with monkeypatch.context() as before:
        before.setattr(query, "output_writers", lambda config, slots: None)
        run_pipeline(config)
    first = _files_per_batch_and_window(tmp_path / "output")
    for file in data.files[3:]:
        file.rename(landing / file.name)
    run_pipeline(config)

    by_batch = Checkpoint.open(str(tmp_path / "checkpoint")).source_files_by_batch()
    batches = [[Path(p.removeprefix("file://")) for p in by_batch[b]] for b in sorted(by_batch)]
    assert [f.name for batch in batches for f in batch] == [f.name for f in data.files]
    # The first run ended with the batch that writes its windows (no data): it moves the watermark that the
    # second run's first batch drops late events by, as any restart does.
    batches.insert(3, [])
    expected = window_oracle(batches, window=timedelta(minutes=15), watermark=timedelta(minutes=10))
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    later = {k: v for k, v in _files_per_batch_and_window(tmp_path / "output").items() if k not in first}
    assert max(first.values()) > 2 >= max(later.values())  # Spark's plan wrote up to 4 files a window, then 2
