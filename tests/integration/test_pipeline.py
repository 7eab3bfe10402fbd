"""The main job end to end on the shared session, checked against the pandas oracle."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers import read_sink, write_config
from tests.oracles import assert_matches_oracle, count_malformed, window_oracle
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import batch_name, read_quarantine, write_marker
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
