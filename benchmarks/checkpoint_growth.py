"""Benchmark: checkpoint file count over 2,000 short batches, tidemark's retention settings vs Spark's defaults.

Two identical stateful queries (count per key over the `rate-micro-batch` source, 50 rows per batch over 10,000
keys, no trigger interval) run side by side in one local[2] session, so both see the same machine load:
- "spark defaults": HDFS-backed state store, minBatchesToRetain = 100;
- "tidemark": RocksDB with changelog checkpointing, minBatchesToRetain = 20 (tidemark's [checkpoint] defaults).
Every `--every` batches the files under each checkpoint are counted (by top folder). The state store
maintenance interval (old state files are deleted there) stays at Spark's 60s default for both, as tidemark
does not change it. Writes a markdown table, and a PNG plot when matplotlib is importable (it is optional).

Run by hand:  .venv/bin/python benchmarks/checkpoint_growth.py --batches 2000 --every 100
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

from _stream_bench import CHANGELOG, HDFS, PROVIDER, RETAIN, ROCKSDB, apply_conf, markdown_table, restore_conf, session

SETUPS: dict[str, dict[str, str]] = {
    "spark defaults": {PROVIDER: HDFS, RETAIN: "100"},
    "tidemark": {PROVIDER: ROCKSDB, CHANGELOG: "true", RETAIN: "20"},
}


def count_files(checkpoint: Path) -> dict[str, int]:
    """Files per top-level checkpoint folder (offsets, commits, state, sources, ...), tolerant of deletions."""
    counts: dict[str, int] = {}
    if not checkpoint.exists():
        return counts
    for top in checkpoint.iterdir():
        try:
            total = sum(1 for p in top.rglob("*") if p.is_file()) if top.is_dir() else 1
        except FileNotFoundError:  # Spark deleted a file while we walked
            total = sum(1 for p in top.rglob("*") if p.is_file()) if top.exists() else 0
        counts[top.name] = total
    return counts


def start(spark: Any, name: str, checkpoint: Path, rows: int, keys: int) -> Any:
    """Start one query with the confs of setup `name`."""
    from pyspark.sql import functions as F

    previous = apply_conf(spark, SETUPS[name])
    try:
        return (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", 1)
            .load()
            .select((F.col("value") % keys).alias("key"))
            .groupBy("key")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .queryName("growth_" + name.replace(" ", "_"))
            .start()
        )
    finally:
        restore_conf(spark, previous)


def _batch(query: Any) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])


def run(spark: Any, work: Path, batches: int, every: int, rows: int, keys: int) -> dict[str, list[dict[str, Any]]]:
    """Run both setups side by side; sample file counts each time a query passes a multiple of `every`."""
    queries = {name: start(spark, name, work / name.replace(" ", "-"), rows, keys) for name in SETUPS}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in SETUPS}
    next_sample = dict.fromkeys(SETUPS, every)
    started = time.monotonic()
    try:
        while any(next_sample[n] <= batches for n in SETUPS):
            for name, query in queries.items():
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                done = _batch(query) + 1
                if next_sample[name] <= batches and done >= next_sample[name]:
                    if done >= batches:
                        query.stop()
                    counts = count_files(work / name.replace(" ", "-"))
                    samples[name].append({"batches": done, "files": sum(counts.values()), "by_folder": counts})
                    print(f"{name}: {done} batches, {sum(counts.values())} files {counts}", file=sys.stderr)
                    next_sample[name] = (done // every + 1) * every
            time.sleep(0.1)
    finally:
        for query in queries.values():
            query.stop()
    print(f"took {time.monotonic() - started:.0f}s", file=sys.stderr)
    return samples


def render(samples: dict[str, list[dict[str, Any]]], every: int) -> str:
    """A markdown table of total file counts per sample point, both setups side by side."""
    names = list(samples)

    def point(sample: dict[str, Any]) -> int:
        return int(sample["batches"]) // every * every

    points = sorted({point(s) for n in names for s in samples[n]})
    rows = []
    for at in points:
        row = [str(at)]
        for name in names:
            match = [s for s in samples[name] if point(s) == at]
            row.append(f"{match[0]['files']} (state {match[0]['by_folder'].get('state', 0)})" if match else "-")
        rows.append(row)
    table = markdown_table(["batches (sampled at)", *[f"files: {n}" for n in names]], rows)
    last = {n: samples[n][-1]["by_folder"] for n in names if samples[n]}
    detail = "\n".join(f"- {n} at the end: {json.dumps(v, sort_keys=True)}" for n, v in last.items())
    return f"{table}\n\n{detail}"


def plot(samples: dict[str, list[dict[str, Any]]], target: Path) -> bool:
    """Write a PNG of file count vs batch when matplotlib is available; False otherwise."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    for name, points in samples.items():
        axis.plot([p["batches"] for p in points], [p["files"] for p in points], marker="o", label=name)
    axis.set_xlabel("batches completed")
    axis.set_ylabel("files in checkpoint")
    axis.set_title("Checkpoint file count")
    axis.legend()
    figure.tight_layout()
    figure.savefig(target)
    return True


def main() -> None:
    """Parse arguments, run, print markdown, write JSON and the plot."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100, help="sample the file count every N batches")
    parser.add_argument("--rows", type=int, default=50, help="rows per batch")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    parser.add_argument("--keep-checkpoints", type=Path, default=None, help="move the checkpoints here at the end")
    parser.add_argument("--json", type=Path, default=None, help="also write raw samples here")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG plot here (needs matplotlib)")
    args = parser.parse_args()

    spark = session(shuffle_partitions=2, driver_memory="2g")
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-growth-"))
    try:
        samples = run(spark, work, args.batches, args.every, args.rows, args.keys)
        if args.keep_checkpoints:
            shutil.copytree(work, args.keep_checkpoints, dirs_exist_ok=True)
    finally:
        # Stop first: state store maintenance threads may still write into the folder.
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(samples, indent=2), encoding="utf-8")
    if args.plot and not plot(samples, args.plot):
        print("matplotlib is not installed: no plot written", file=sys.stderr)
    print(render(samples, args.every))


if __name__ == "__main__":
    main()
