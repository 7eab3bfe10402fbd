"""Benchmark: per-key sessions with Spark's session_window vs tidemark's lifecycle layer (same input, same run).

Run by hand: .venv/bin/python benchmarks/sessions.py [--events 20000] [--keys 200] [--files 10] [--repeat 2]
Prints the wall time of each engine (availableNow over the same files, noop sink) and the ratio lifecycle/native.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from tidemark.compat import UTC

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
GAP = timedelta(minutes=10)


def write_events(folder: Path, events: int, keys: int, files: int, seed: int = 7) -> None:
    """Events in time order, split over files; each key sends bursts separated by idle periods."""
    rng = random.Random(seed)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    per_file = events // files
    clock = 0.0
    folder.mkdir(parents=True)
    for index in range(files):
        lines = []
        for _ in range(per_file):
            clock += rng.expovariate(1.0) * 2.0  # about one event per 2 s overall
            user = f"user{rng.randrange(keys):05d}"
            lines.append(json.dumps({"user": user, "ts": (start + timedelta(seconds=clock)).isoformat()}))
        path = folder / f"part-{index:04d}.json"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))


def run_once(engine: str, source: Path, checkpoint: Path) -> tuple[float, int]:
    """Run one engine over every file (one file per batch); return (seconds, sessions emitted)."""
    from pyspark.sql import SparkSession

    from tidemark.pipeline.transforms.session import build_lifecycle, build_native

    spark = SparkSession.getActiveSession()
    assert spark is not None
    events = (
        spark.readStream.schema("user STRING, ts TIMESTAMP")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .withWatermark("ts", "5 minutes")
    )
    build = build_lifecycle if engine == "lifecycle" else build_native
    frame = build(events, ["user"], "ts", GAP)
    began = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - began
    emitted = sum(int(p.sink.numOutputRows) for p in query.recentProgress if p.sink.numOutputRows >= 0)
    return elapsed, emitted


def main() -> int:
    """Parse flags, run both engines alternately, print the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from tidemark.session import build_session

    build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        },
    )
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-sessions-"))
    try:
        write_events(work / "in", args.events, args.keys, args.files)
        times: dict[str, list[float]] = {"native": [], "lifecycle": []}
        emitted: dict[str, int] = {}
        for round_ in range(args.repeat):
            for engine in ("native", "lifecycle"):
                seconds, rows = run_once(engine, work / "in", work / f"ckpt-{engine}-{round_}")
                times[engine].append(seconds)
                emitted[engine] = rows
                print(f"round {round_} {engine:9s} {seconds:7.1f} s  sessions emitted {rows}", flush=True)
        native, lifecycle = statistics.median(times["native"]), statistics.median(times["lifecycle"])
        print(f"events={args.events} keys={args.keys} files(batches)={args.files} repeat={args.repeat}")
        print(f"median native    {native:7.1f} s")
        print(f"median lifecycle {lifecycle:7.1f} s")
        print(
            f"ratio lifecycle/native = {lifecycle / native:.2f}; same sessions emitted: "
            f"{emitted['native'] == emitted['lifecycle']}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
