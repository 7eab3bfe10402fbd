"""Overhead of RunMonitor: the same windowed aggregation with and without it, end-to-end wall time, one process.

Run by hand: .venv/bin/python benchmarks/monitor_overhead.py [--files 30] [--rows 2000] [--rounds 7]

Each round runs both variants (ABBA order) over the same files, one file per micro-batch, small enough that a
batch takes well under 300 ms, so per-batch costs show. Measured per run: wall time from query start until the
query ended AND the monitor flushed and stopped (the listener's own thread and the log writer included), and
Spark's batchDuration. Reported: per-round ratio monitored/plain of wall time, median and spread.
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


def run_once(spark: Any, source: Path, root: Path, monitored: bool, label: str) -> tuple[float, list[int]]:
    """One available-now run over every file: (wall seconds, Spark's batchDuration of each batch with input)."""
    from pyspark.sql import functions as F

    from tidemark.config import parse_config
    from tidemark.monitor.listener import RunMonitor

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
    began = time.perf_counter()
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
    wall = time.perf_counter() - began
    # Batch 0 carries planning and JIT warm-up in both variants; it is left out of the batch-time comparison.
    return wall, [p["batchDuration"] for p in progress if p["numInputRows"] > 0 and p["batchId"] > 0]


def micro_costs(root: Path, sample: dict[str, Any]) -> dict[str, float]:
    """Per-batch cost of the monitor's own work (parse, metrics update, durable write), in milliseconds."""
    from tidemark.formats import BatchProgress, ProgressLogWriter
    from tidemark.monitor.metrics import MetricsRegistry

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
    """Alternate plain and monitored runs over the same files; print per-round wall-time ratios and batch times."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from tidemark.session import build_session

    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"})
    root = Path(tempfile.mkdtemp(prefix="tm-bench-monitor-"))
    source = root / "in"
    write_inputs(source, args.files, args.rows)
    run_once(spark, source, root, monitored=False, label="warmup")
    run_once(spark, source, root, monitored=True, label="warmup-mon")
    walls: dict[bool, list[float]] = {False: [], True: []}
    batches: dict[bool, list[int]] = {False: [], True: []}
    for r in range(args.rounds):
        # ABBA order so drift of the (shared, busy) machine hits both variants alike.
        order = [False, True] if r % 2 == 0 else [True, False]
        for flag in order:
            wall, durations = run_once(spark, source, root, flag, f"{'mon' if flag else 'plain'}{r}")
            walls[flag].append(wall)
            batches[flag].extend(durations)
            name = "monitored" if flag else "plain    "
            print(f"round {r} {name}: {wall:7.2f} s, {statistics.median(durations):6.0f} ms/batch")
    sample_log = next((root / "monitor").glob("*.jsonl"))
    sample = next(json.loads(line)["progress"] for line in sample_log.read_text().splitlines() if '"progress"' in line)
    costs = micro_costs(root, sample)
    ratios = [m / p for p, m in zip(walls[False], walls[True], strict=True)]
    result = {
        "rounds": args.rounds,
        "batches_per_run": args.files,
        "median_batch_ms": {"plain": statistics.median(batches[False]), "monitored": statistics.median(batches[True])},
        "wall_s_median": {"plain": statistics.median(walls[False]), "monitored": statistics.median(walls[True])},
        "wall_ratio_per_round": [round(x, 4) for x in ratios],
        "wall_ratio_median": round(statistics.median(ratios), 4),
        "wall_ratio_min": round(min(ratios), 4),
        "wall_ratio_max": round(max(ratios), 4),
        "micro_costs_ms": {k: round(v, 3) for k, v in costs.items()},
    }
    print(json.dumps(result, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
