"""Kafka offsets from a checkpoint and from progress events, with no broker: committed offsets per partition,
lost ranges and their finding, per-partition lag in the progress log, its analysis, report and metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tidemark.formats import Checkpoint, ProgressLogWriter
from tidemark.formats.kafka_offsets import TopicPartition, offsets_json, parse_offsets
from tidemark.monitor.analyze import analyze
from tidemark.monitor.report import render_report
from tidemark.sources.kafka import kafka_findings, kafka_report
from tidemark.sources.kafka.committed import committed_offsets, planned_offsets
from tidemark.sources.kafka.offsets import lost_ranges

T0, T1 = TopicPartition("clicks", 0), TopicPartition("clicks", 1)


def _checkpoint(root: Path, offsets: list[dict[str, Any]], commits: int) -> Checkpoint:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, offset in enumerate(offsets):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (root / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offset)}")
    for batch in range(commits):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"clicks":{"0":0,"1":3}}')
    return Checkpoint.open(str(root))


def test_committed_and_planned_offsets_and_lost_ranges(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "a", [{"clicks": {"0": 10, "1": 7}}, {"clicks": {"0": 25, "1": 9}}], commits=1)
    assert committed_offsets(checkpoint) == {T0: 10, T1: 7}  # batch 1 is planned, not committed
    assert planned_offsets(checkpoint) == {T0: 25, T1: 9}
    fresh = _checkpoint(tmp_path / "b", [{"clicks": {"0": 10, "1": 7}}], commits=0)
    assert committed_offsets(fresh) == {T0: 0, T1: 3}  # before the first commit: the initial offsets

    report = kafka_report(checkpoint, earliest={T0: 12, T1: 0}, end={T0: 40, T1: 9}, broker="b:9092")
    assert report is not None
    assert [(p.partition, p.lag, p.expired) for p in report.partitions] == [(0, 30, True), (1, 2, False)]
    assert report.total_lag == 32
    (finding,) = kafka_findings(report)
    assert finding.code == "OFFSETS_EXPIRED" and "clicks-0 offsets 10..11" in finding.message
    assert lost_ranges({T0: 10, T1: 7}, {T0: 10, T1: 8})[0].records == 1
    assert parse_offsets(offsets_json({T1: 5, T0: -2})) == {T0: -2, T1: 5}
    assert parse_offsets({"logOffset": 3}) is None  # a file source's offset


def _progress(batch: int, end: int) -> dict[str, Any]:
    return {
        "id": "q",
        "runId": "r",
        "name": "clicks",
        "timestamp": f"2026-01-01T00:0{batch}:00.000Z",
        "batchId": batch,
        "batchDuration": 1000,
        "numInputRows": 10,
        "durationMs": {"triggerExecution": 1000},
        "sources": [
            {
                "description": "KafkaV2[Subscribe[clicks]]",
                "endOffset": {"clicks": {"0": end, "1": 4}},
                "latestOffset": {"clicks": {"0": 100, "1": 4}},
            }
        ],
    }


def test_lag_per_partition_reaches_the_analysis_and_the_report(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    writer = ProgressLogWriter(log, "run-1")
    writer.open()
    for batch, end in enumerate((20, 60, 90)):
        writer.write("progress", progress=_progress(batch, end))
    writer.close()
    (run,) = analyze(log).runs
    assert run.source_lag == {"clicks-0": 10, "clicks-1": 0}
    assert run.max_source_lag == 80
    html = render_report(log)
    assert "Kafka lag (last batch)" in html and "clicks-0 10" in html and "Kafka lag (records not yet read)" in html


def test_the_kafka_restart_defect_is_known_for_spark_4_1_only() -> None:
    from tidemark.spark.lines import Defect, has_defect

    # Read off each line's spark-sql-kafka jar: KafkaMicroBatchStream.metrics on the offsets planning fetched.
    assert [
        v for v in ("3.5.7", "4.0.0", "4.1.1", "4.2.0", "4.3.0") if has_defect(Defect.KAFKA_METRICS_AFTER_RESTART, v)
    ] == ["4.1.1"]
