"""Overhead of RunMonitor on batch time: the same windowed aggregation with and without it, in one run.

Run by hand: .venv/bin/python benchmarks/monitor_overhead.py [--files 10] [--rows 20000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA = "user STRING, ts TIMESTAMP, value INT"


def write_inputs(folder: Path, files: int, rows: int) -> None:
    """files JSON-lines files of rows events each, one minute of event time per file, 1000 users."""
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [
            json.dumps(
                {"user": f"u{i % 1000}", "ts": f"2026-01-01T{f // 60:02d}:{f % 60:02d}:{i % 60:02d}Z", "value": i}
            )
            for i in range(rows)
        ]
        path = folder / f"part-{f:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))


def run_once(spark: Any, source: Path, root: Path, monitored: bool, label: str) -> list[int]:
    """One available-now run over every file; returns Spark's batchDuration of each batch with input."""
    from pyspark.sql import functions as F

    from tidemark.config import parse_config
    from tidemark.monitor.runmonitor import RunMonitor

    checkpoint = root / f"ckpt-{label}"
    config = parse_config(
        {
            "pipeline": {"name": label},
            "source": {"format": "json", "path": str(source), "schema": SCHEMA},
            "event_time": {"column": "ts"},
            "aggregation": {"kind": "window", "key": ["user"], "window": "1 minute"},
            "sink": {"format": "console"},
            "checkpoint": {"location": str(checkpoint), "state_store": "hdfs"},
            "quarantine": {"path": str(root / "q")},
            "monitor": {"dir": str(root / "monitor"), "metrics_port": 0},
        }
    )
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    counts = frame.withWatermark("ts", "30 seconds").groupBy(F.window("ts", "1 minute"), "user").count()
    monitor = RunMonitor(spark, config, label) if monitored else None
    if monitor is not None:
        monitor.start()
    try:
        query = (
            counts.writeStream.format("noop")
            .outputMode("append")
            .queryName(label)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        if monitor is not None:
            monitor.attach(query)
        query.awaitTermination()
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        if monitor is not None:
            monitor.stop()
    # Batch 0 carries planning and JIT warm-up in both variants; it is left out of the comparison.
    return [p["batchDuration"] for p in progress if p["numInputRows"] > 0 and p["batchId"] > 0]


def micro_costs(root: Path, sample: dict[str, Any]) -> dict[str, float]:
    """Per-batch cost of the monitor's own work (parse, metrics update, durable write), in milliseconds."""
    from tidemark.monitor.metrics import MetricsRegistry
    from tidemark.monitor.progress import BatchProgress
    from tidemark.monitor.writer import ProgressLogWriter

    text = json.dumps(sample)
    writer = ProgressLogWriter(root / "micro.jsonl", "micro")
    writer.open()
    registry = MetricsRegistry()
    n = 300
    began = time.perf_counter()
    for _ in range(n):
        data = json.loads(text)
        registry.update(BatchProgress.from_json(data))
    parse_ms = (time.perf_counter() - began) * 1000 / n
    began = time.perf_counter()
    for _ in range(n):
        writer.write("progress", progress=sample)
    write_ms = (time.perf_counter() - began) * 1000 / n
    writer.close()
    began = time.perf_counter()
    for _ in range(n):
        registry.render()
    render_ms = (time.perf_counter() - began) * 1000 / n
    return {"parse_and_metrics_ms": parse_ms, "write_fsync_ms": write_ms, "scrape_render_ms": render_ms}


def main() -> None:
    """Alternate plain and monitored runs over the same files; print the ratio of mean batch times."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from tidemark.session import build_session

    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"})
    root = Path(tempfile.mkdtemp(prefix="tm-bench-monitor-"))
    source = root / "in"
    write_inputs(source, args.files, args.rows)
    run_once(spark, source, root, monitored=False, label="warmup")
    plain: list[int] = []
    monitored: list[int] = []
    for r in range(args.rounds):
        # ABBA order so drift of the (shared, busy) machine hits both variants alike.
        order = [False, True] if r % 2 == 0 else [True, False]
        for flag in order:
            durations = run_once(spark, source, root, flag, f"{'mon' if flag else 'plain'}{r}")
            (monitored if flag else plain).extend(durations)
            print(f"round {r} {'monitored' if flag else 'plain    '}: {statistics.mean(durations):8.1f} ms/batch")
    sample_log = next((root / "monitor").glob("*.jsonl"))
    sample = next(json.loads(line)["progress"] for line in sample_log.read_text().splitlines() if '"progress"' in line)
    costs = micro_costs(root, sample)
    mean_plain, mean_mon = statistics.mean(plain), statistics.mean(monitored)
    print(f"batches: {len(plain)} plain, {len(monitored)} monitored ({args.rows} rows per batch)")
    print(f"mean batch time: plain {mean_plain:.1f} ms, monitored {mean_mon:.1f} ms")
    print(
        f"median batch time: plain {statistics.median(plain):.1f} ms, monitored {statistics.median(monitored):.1f} ms"
    )
    print(f"ratio monitored/plain (mean): {mean_mon / mean_plain:.4f}")
    print(f"ratio monitored/plain (median): {statistics.median(monitored) / statistics.median(plain):.4f}")
    for key, value in costs.items():
        print(f"{key}: {value:.3f} ms per batch ({value / mean_plain:.4%} of a mean batch)")
    spark.stop()


if __name__ == "__main__":
    main()
