"""Benchmark: HDFS-backed vs RocksDB vs RocksDB + changelog checkpointing on one stateful workload.

Workload: a streaming aggregation (count and sum per key) over the `rate-micro-batch` source, which gives
exactly `keys` rows per batch; row i has key i % keys, so every batch updates every key once. Each setup runs
the same number of batches in the same Spark session (local[2]), one after the other; reported per setup:
median batch duration, median state commit time, the state operator's memory, and the checkpoint size on disk,
each also as a ratio to the HDFS-backed baseline. Batch 0 (which creates every key) is reported separately.
A short warm-up run of every setup comes first and is not reported.

Run by hand:  .venv/bin/python benchmarks/state_store.py --keys 10000,100000,1000000 --batches 6
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _stream_bench import SETUPS, Summary, apply_conf, folder_stats, markdown_table, restore_conf, run_batches, session

TIDEMARK_DEFAULT = "rocksdb+changelog"


def _state_metric(progress: dict[str, Any], name: str) -> float:
    return float(sum(op.get(name, 0) for op in progress.get("stateOperators", [])))


def measure(spark: Any, setup: str, keys: int, batches: int, work: Path, timeout: float) -> dict[str, Any]:
    """Run one setup for `batches` batches of `keys` rows; return its measurements."""
    from pyspark.sql import functions as F

    checkpoint = work / f"{setup}-{keys}"
    previous = apply_conf(spark, SETUPS[setup])
    try:
        stream = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", keys)
            .option("numPartitions", 2)
            .load()
            .select((F.col("value") % keys).alias("key"), F.col("value"))
            .groupBy("key")
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        )
        started = time.perf_counter()
        query = (
            stream.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .queryName(f"bench_{setup.replace('+', '_')}_{keys}")
            .start()
        )
        progress = run_batches(query, batches, timeout)
        wall = time.perf_counter() - started
    finally:
        restore_conf(spark, previous)
    steady = progress[1:]
    files, size = folder_stats(checkpoint / "state")
    last = progress[-1]
    rows_total = _state_metric(last, "numRowsTotal")
    if rows_total != keys:
        msg = f"{setup}: state holds {rows_total:.0f} rows after {batches} batches, expected {keys}"
        raise RuntimeError(msg)
    return {
        "setup": setup,
        "keys": keys,
        "batches": batches,
        "wall_s": wall,
        "first_batch_ms": float(progress[0]["batchDuration"]),
        "batch_ms": Summary.of([float(p["batchDuration"]) for p in steady]).median,
        "commit_ms": Summary.of([_state_metric(p, "commitTimeMs") for p in steady]).median,
        "memory_bytes": _state_metric(last, "memoryUsedBytes"),
        "state_files": files,
        "state_bytes": size,
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def render(results: list[dict[str, Any]]) -> str:
    """Markdown tables: absolute numbers and ratios to the HDFS-backed baseline, per key count."""
    parts: list[str] = []
    for keys in sorted({r["keys"] for r in results}):
        group = [r for r in results if r["keys"] == keys]
        base = next(r for r in group if r["setup"] == "hdfs")
        rows = [
            [
                r["setup"] + (" (tidemark default)" if r["setup"] == TIDEMARK_DEFAULT else ""),
                f"{r['first_batch_ms']:.0f}",
                f"{r['batch_ms']:.0f} ({_ratio(r['batch_ms'], base['batch_ms'])})",
                f"{r['commit_ms']:.0f} ({_ratio(r['commit_ms'], base['commit_ms'])})",
                f"{r['memory_bytes'] / 1024**2:.1f} ({_ratio(r['memory_bytes'], base['memory_bytes'])})",
                f"{r['state_bytes'] / 1024**2:.1f} MB / {r['state_files']} files",
            ]
            for r in group
        ]
        header = ["setup", "batch 0 ms", "batch ms (median)", "commit ms (median)", "state memory MB", "state on disk"]
        parts.append(f"### {keys:,} keys, {group[0]['batches']} batches\n\n" + markdown_table(header, rows))
        best = min(group, key=lambda r: r["batch_ms"])
        verdict = (
            "the tidemark default has the shortest batches"
            if best["setup"] == TIDEMARK_DEFAULT
            else f"**{best['setup']} has shorter batches than the tidemark default here**"
        )
        parts.append(f"Verdict at {keys:,} keys: {verdict}.")
    return "\n\n".join(parts)


def main() -> None:
    """Parse arguments, run every setup for every key count, print markdown and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="10000,100000,1000000", help="comma-separated key counts")
    parser.add_argument("--batches", type=int, default=6, help="batches per run (batch 0 creates the keys)")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated setups")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per run")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args()

    spark = session()
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-state-"))
    results: list[dict[str, Any]] = []
    try:
        # Warm the JVM (JIT, class loading) with every setup so the first measured setup is not penalised.
        for setup in args.setups.split(","):
            measure(spark, setup, 1000, 3, work / "warmup", args.timeout)
        for keys in [int(k) for k in args.keys.split(",")]:
            for setup in args.setups.split(","):
                result = measure(spark, setup, keys, args.batches, work, args.timeout)
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
    finally:
        # Stop first: state store maintenance threads may still write into the folder.
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(render(results))


if __name__ == "__main__":
    main()
