"""Benchmark: `tidemark state stats` vs a hand-written statestore count on the same checkpoint (run by hand).

usage: .venv/bin/python benchmarks/state_stats.py [--keys 1000000] [--rounds 5] [--workdir DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from tidemark.session import build_session
from tidemark.statestore.stats import state_stats

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def build_checkpoint(spark, workdir: Path, keys: int) -> Path:
    """One streaming aggregation batch over `keys` distinct keys: a state of exactly `keys` rows."""
    from pyspark.sql import functions as F

    source, checkpoint = workdir / "in", workdir / "ck"
    shutil.rmtree(workdir, ignore_errors=True)
    spark.range(keys).select(F.concat(F.lit("user-"), F.col("id").cast("string")).alias("key")).write.parquet(
        str(source)
    )
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    events = spark.readStream.schema("key string").parquet(str(source))
    query = (
        events.groupBy("key")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return checkpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", default="/tmp/tidemark-bench-state")
    parser.add_argument("--reuse", action="store_true", help="reuse the checkpoint a previous run built")
    args = parser.parse_args()
    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    started = time.perf_counter()
    checkpoint = Path(args.workdir) / "ck"
    if not (args.reuse and (checkpoint / "commits" / "0").is_file()):
        checkpoint = build_checkpoint(spark, Path(args.workdir), args.keys)
        print(f"built a {args.keys:,}-key state in {time.perf_counter() - started:.1f}s")
    _ = spark.streams.active  # starts the StateStoreCoordinator the RocksDB reader reports to

    def baseline() -> int:
        return int(spark.read.format("statestore").load(str(checkpoint)).count())

    def tidemark() -> int:
        return state_stats(checkpoint).operators[0].rows

    assert baseline() == tidemark() == args.keys  # warm-up, and both must agree
    times: dict[str, list[float]] = {"baseline": [], "tidemark": []}
    for _ in range(args.rounds):
        for name, run in (("baseline", baseline), ("tidemark", tidemark)):
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    base, ours = statistics.median(times["baseline"]), statistics.median(times["tidemark"])
    print(f"statestore count: median {base:.2f}s of {[round(x, 2) for x in times['baseline']]}")
    print(f"tidemark stats:   median {ours:.2f}s of {[round(x, 2) for x in times['tidemark']]}")
    print(f"ratio {ours / base:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
