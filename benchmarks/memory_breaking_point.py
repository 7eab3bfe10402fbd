"""Does the memory planner predict where a stateful query on the HDFS-backed store breaks? (run by hand)

Method: one subprocess per key count, each a fresh local[2] JVM with a small driver heap (spark.driver.memory is
fixed at JVM start). Each run aggregates a rate-micro-batch stream by a key with `value % keys`, so after two
batches the state holds `keys` rows and the third batch rewrites half of them; the state lives on the heap
(HDFS-backed store).
The smaller (calibration) runs give the measured state size (memoryUsedBytes); the planner, fed that size for the
same heap, says at which scale the verdict turns 'over' (utilization > 100 %), which is the predicted breaking
point. Larger runs then go up until one fails (OutOfMemoryError, the JVM dies, or it stalls past the timeout).

Usage: .venv/bin/python benchmarks/memory_breaking_point.py [--heap 1g] [--payload 4000]
       [--calibrate 20000,40000] [--keys 70000,90000,...] [--timeout 300]
Results and method: docs/benchmarks/memory_breaking_point.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
BATCHES = 3


def say(text: str) -> None:
    """Print at once: the runs take minutes and the output is often piped to a file."""
    print(text, flush=True)


def child(keys: int, heap: str, payload: int, out: Path) -> None:
    """Run the stateful query at one key count and write what happened, batch by batch."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(f"breaking-point-{keys}")
        .config("spark.driver.memory", heap)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass", HDFS)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jvm_max = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()  # type: ignore[union-attr]
    rows = max(1, keys // 2)
    events = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .load()
        .withColumn("key", F.col("value") % keys)
        .withColumn("payload", F.concat(F.col("value").cast("string"), F.repeat(F.lit("x"), payload)))
    )
    state = events.groupBy("key").agg(F.max("payload").alias("payload"))
    batches: list[dict[str, object]] = []
    outcome = "ok"
    with tempfile.TemporaryDirectory() as ckpt:
        query = (
            state.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            while True:
                progress = query.lastProgress
                if query.exception() is not None:
                    outcome = f"failed: {str(query.exception())[:300]}"
                    break
                if progress is not None and progress["batchId"] >= BATCHES - 1:
                    break
                time.sleep(0.5)
            batches = [
                {
                    "batch": p["batchId"],
                    "ms": p["batchDuration"],
                    "rows": p["stateOperators"][0]["numRowsTotal"],
                    "memory_used_bytes": p["stateOperators"][0]["memoryUsedBytes"],
                    "current_version_bytes": p["stateOperators"][0]["customMetrics"].get(
                        "stateOnCurrentVersionSizeBytes", 0
                    ),
                }
                for p in query.recentProgress
            ]
        finally:
            query.stop()
    out.write_text(json.dumps({"keys": keys, "jvm_max_memory": jvm_max, "outcome": outcome, "batches": batches}))
    spark.stop()


@dataclass(frozen=True)
class Run:
    """One key count's result."""

    keys: int
    outcome: str
    seconds: float
    state_bytes: int
    jvm_max_memory: int
    current_version_bytes: int = 0


def run(keys: int, heap: str, payload: int, timeout: float) -> Run:
    """Start one child JVM and classify its end."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--child", str(keys), "--heap", heap, "--payload", str(payload)]
        command += ["--out", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Run(keys, f"failed: no progress within {timeout:.0f}s (GC thrash)", timeout, 0, 0)
        seconds = time.monotonic() - start
        if not out.exists():
            tail = " ".join((done.stderr or "").strip().splitlines()[-3:])[:300]
            oom = "OutOfMemoryError" in (done.stderr or "")
            return Run(
                keys, f"failed: {'OutOfMemoryError, ' if oom else ''}exit {done.returncode}: {tail}", seconds, 0, 0
            )
        data = json.loads(out.read_text())
    batches = data["batches"]
    state = max((b["memory_used_bytes"] for b in batches), default=0)
    current = max((b["current_version_bytes"] for b in batches), default=0)
    outcome = data["outcome"]
    if outcome != "ok" and "OutOfMemoryError" in (done.stderr or ""):
        # A task's OutOfMemoryError shuts the local SparkContext down; the query only sees the shutdown.
        outcome = f"failed: OutOfMemoryError ({outcome.removeprefix('failed: ')[:120]})"
    return Run(keys, outcome, seconds, state, data["jvm_max_memory"], current)


def predict(calibration: list[Run], heap: str) -> tuple[float, float]:
    """Feed the planner the measured state of the calibration runs; return (bytes per key, predicted keys)."""
    from tidemark.sizing.load import spark_memory
    from tidemark.sizing.memory import MemoryConf, MemoryLoad, plan_memory

    largest = max(calibration, key=lambda r: r.keys)
    conf = MemoryConf(executor_memory_bytes=spark_memory(heap))
    plan = plan_memory(conf, MemoryLoad(state_bytes=largest.state_bytes))
    # utilization grows with live keys, so the verdict turns 'over' at scale 1 / utilization
    scale = 1 / plan.per_executor.utilization
    check = plan_memory(conf, MemoryLoad(state_bytes=largest.state_bytes), scale=scale * 1.001)
    assert check.projection is not None and check.projection.verdict.value == "over"
    return largest.state_bytes / largest.keys, largest.keys * scale


def main() -> None:
    """Calibrate, predict, then climb the key counts until a run fails."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", type=int)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--heap", default="1g")
    parser.add_argument("--payload", type=int, default=4000)
    parser.add_argument("--calibrate", default="20000,40000")
    parser.add_argument("--keys", default="")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.heap, args.payload, args.out)
        return
    calibration = [run(int(k), args.heap, args.payload, args.timeout) for k in args.calibrate.split(",")]
    for r in calibration:
        say(
            f"calibration {r.keys:>9,} keys: {r.outcome}, state {r.state_bytes / 2**20:,.1f} MB "
            f"(current version {r.current_version_bytes / 2**20:,.1f} MB), {r.seconds:.0f}s"
        )
    per_key, predicted = predict(calibration, args.heap)
    say(f"jvm maxMemory {calibration[0].jvm_max_memory / 2**20:,.1f} MB; {per_key:,.0f} state bytes per key")
    say(f"planner: utilization reaches 100 % at {predicted:,.0f} keys ({predicted * per_key / 2**20:,.1f} MB)")
    largest = max(calibration, key=lambda r: r.keys)
    if largest.current_version_bytes:
        # memoryUsedBytes counts every version kept in memory; the current version alone is the other reading.
        current_keys = predicted * largest.state_bytes / largest.current_version_bytes
        say(f"planner fed the current version only (stateOnCurrentVersionSizeBytes): {current_keys:,.0f} keys")
    ladder = (
        [int(k) for k in args.keys.split(",")]
        if args.keys
        else [int(predicted * f) for f in (1.0, 1.25, 1.5, 1.75, 1.9, 2.0, 2.25, 2.5)]
    )
    for keys in ladder:
        r = run(keys, args.heap, args.payload, args.timeout)
        say(
            f"run {keys:>9,} keys: {r.outcome[:160]}, state {r.state_bytes / 2**20:,.1f} MB "
            f"(current version {r.current_version_bytes / 2**20:,.1f} MB), {r.seconds:.0f}s"
        )
        if not r.outcome.startswith("ok"):
            say(f"measured breaking point: between the last ok run and {keys:,} keys; predicted {predicted:,.0f}")
            return
    say(f"no run failed up to {ladder[-1]:,} keys; predicted {predicted:,.0f}")


if __name__ == "__main__":
    main()
