"""Issue 16.3: `tidemark audit` on a clean run, and on hand-made violations of exactly-once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.audit import ViolationKind, audit_sink
from tidemark.recovery.failover import Failover

pytestmark = pytest.mark.integration


@pytest.fixture
def clean_run(spark: Any, tmp_path: Path) -> Path:
    generate_events(tmp_path / "landing", events=400, keys=4, files=4, seed=16)
    config_path = write_config(tmp_path)
    run_pipeline(load_config(config_path), spark=spark, prestarts=[Failover()])
    return config_path


def _kinds(config_path: Path) -> set[ViolationKind]:
    return {v.kind for v in audit_sink(load_config(config_path)).violations}


def test_a_clean_run_is_exactly_once(clean_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = audit_sink(load_config(clean_run))
    assert result.ok, result.violations
    sink = clean_run.parent / "output"
    files = {p.relative_to(sink).as_posix() for p in sink.rglob("*.parquet")}
    assert {f for b in result.batches for f in b.sink_files} == files  # every file, each in one batch
    assert all(b.in_sink_log and b.in_ledger for b in result.batches)
    assert sum(len(b.source) for b in result.batches) == 4  # the four landing files, each read once
    assert main(["audit", str(clean_run)]) == 0
    assert "exactly once" in capsys.readouterr().out


def test_a_copied_file_is_a_duplicate_outside_every_batch(clean_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sink = clean_run.parent / "output"
    original = next(iter(sorted(sink.rglob("*.parquet"))))
    copy = original.with_name("part-99999-copy.c000.snappy.parquet")
    shutil.copy(original, copy)
    result = audit_sink(load_config(clean_run))
    kinds = {v.kind: v for v in result.violations}
    assert set(kinds) == {ViolationKind.DUPLICATE_KEY, ViolationKind.FILE_OUTSIDE_EVERY_BATCH}
    assert kinds[ViolationKind.FILE_OUTSIDE_EVERY_BATCH].files == (copy.relative_to(sink).as_posix(),)
    assert main(["audit", str(clean_run)]) == 1
    assert copy.name in capsys.readouterr().out


def test_a_deleted_file_and_a_half_written_batch(clean_run: Path) -> None:
    sink = clean_run.parent / "output"
    victim = next(iter(sorted(sink.rglob("*.parquet"))))
    victim.unlink()
    assert _kinds(clean_run) == {ViolationKind.LISTED_FILE_MISSING}
    # A half-written batch: its file landed, its sink log entry did not (the newest entry is gone too).
    stray = sink / "windowStart=2031-01-01 00%3A00%3A00"
    stray.mkdir()
    shutil.copy(next(iter(sorted(sink.rglob("*.parquet")))), stray / "part-00000-half.c000.snappy.parquet")
    logs = sorted((sink / "_spark_metadata").glob("[0-9]*"), key=lambda p: int(p.name.split(".")[0]))
    logs[-1].unlink()
    kinds = _kinds(clean_run)
    assert {ViolationKind.FILE_OUTSIDE_EVERY_BATCH, ViolationKind.BATCH_WITHOUT_SINK_ENTRY} <= kinds


def test_spark_s_offline_repartition_batch_is_no_missing_output(
    clean_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Spark 4.2+'s StreamingCheckpointManager.repartition commits a batch of its own, as recorded on 4.2.1: offsets/N+1
    # is offsets/N with the new spark.sql.shuffle.partitions, commits/N+1 is commits/N; the file sink never logs it.
    # (Spark 4.1, the suite's line, has no offline repartition: the batch is written here as Spark writes it.)
    checkpoint = clean_run.parent / "checkpoint"
    last = max(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
    meta = json.loads(lines[1])
    old = meta["conf"]["spark.sql.shuffle.partitions"]
    meta["conf"]["spark.sql.shuffle.partitions"] = str(int(old) * 2)
    (checkpoint / "offsets" / str(last + 1)).write_text("\n".join([lines[0], json.dumps(meta), *lines[2:]]))
    shutil.copy(checkpoint / "commits" / str(last), checkpoint / "commits" / str(last + 1))
    result = audit_sink(load_config(clean_run))
    assert result.ok, result.violations
    assert [b.batch for b in result.batches][-1] == last + 1
    assert any(
        f"batch {last + 1} is Spark's offline state repartition ({old} -> {int(old) * 2}" in n for n in result.notes
    )
    # The next batch (no new input here) gets a sink log file: the log now skips the repartition batch, and every
    # Spark reader of the sink fails on it. The audit reads past it and says so, with the file that closes the gap.
    sink_log = clean_run.parent / "output" / "_spark_metadata"
    later = dict(meta, batchTimestampMs=meta["batchTimestampMs"] + 1000)
    later["conf"] = dict(meta["conf"], **{"spark.sql.shuffle.partitions": old})
    (checkpoint / "offsets" / str(last + 2)).write_text("\n".join([lines[0], json.dumps(later), *lines[2:]]))
    shutil.copy(checkpoint / "commits" / str(last), checkpoint / "commits" / str(last + 2))
    (sink_log / str(last + 2)).write_text("v1")
    gap = audit_sink(load_config(clean_run))
    assert [(v.kind, v.batches) for v in gap.violations] == [(ViolationKind.SINK_LOG_GAP, (last + 1,))]
    assert f"'v1' into {sink_log}/{last + 1}" in gap.violations[0].message
    (sink_log / str(last + 1)).write_text("v1")
    assert audit_sink(load_config(clean_run)).ok
    for batch in (last + 1, last + 2):
        (sink_log / str(batch)).unlink()
    (checkpoint / "offsets" / str(last + 2)).unlink()
    (checkpoint / "commits" / str(last + 2)).unlink()
    # A batch that read input and is missing from the sink log is still a violation.
    meta["batchTimestampMs"] += 1000
    (checkpoint / "offsets" / str(last + 1)).write_text("\n".join([lines[0], json.dumps(meta), *lines[2:]]))
    assert ViolationKind.BATCH_WITHOUT_SINK_ENTRY in _kinds(clean_run)
