"""Throughput: the same windowed aggregation through tidemark, a hand-written streaming job, and a batch job.

Run by hand: `.venv/bin/python benchmarks/throughput.py [--events 1000000] [--rounds 3]`.
All three run in one process on one local[2] session, interleaved round by round, on the same
generated files; the ratios (tidemark / plain streaming) are what to compare across machines.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import write_config  # noqa: E402

from tidemark.config import load_config  # noqa: E402
from tidemark.config.model import ROCKSDB_PROVIDER  # noqa: E402
from tidemark.pipeline.generate import generate_events  # noqa: E402
from tidemark.pipeline.run import run_pipeline  # noqa: E402
from tidemark.session import build_session  # noqa: E402

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def plain_streaming(spark, landing: Path, out: Path, files_per_trigger: int) -> float:  # type: ignore[no-untyped-def]
    """What a careful user writes by hand: same source, watermark, window, sink and state store."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .json(str(landing))
        .withColumn("ts", F.to_timestamp("ts"))
        .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
        .withWatermark("ts", "10 minutes")
    )
    result = events.groupBy("user", F.window("ts", "15 minutes")).agg(
        F.min("ts").alias("firstEventTime"),
        F.max("ts").alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("value_sum"),
    )
    query = (
        result.select(
            "user",
            F.col("window.start").alias("windowStart"),
            F.col("window.end").alias("windowEnd"),
            "firstEventTime",
            "lastEventTime",
            "count",
            "value_sum",
        )
        .writeStream.format("parquet")
        .option("path", str(out / "output"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .partitionBy("windowStart")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(p["batchDuration"] for p in query.recentProgress) / 1000


def plain_batch(spark, landing: Path, out: Path) -> None:  # type: ignore[no-untyped-def]
    """The same windows computed in one batch job (no state store, no watermark)."""
    from pyspark.sql import functions as F

    events = (
        spark.read.schema(SCHEMA)
        .json(str(landing))
        .withColumn("ts", F.to_timestamp("ts"))
        .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
    )
    result = events.groupBy("user", F.window("ts", "15 minutes")).agg(
        F.min("ts").alias("firstEventTime"),
        F.max("ts").alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("value_sum"),
    )
    result.select("user", F.col("window.start").alias("windowStart"), "count", "value_sum").write.partitionBy(
        "windowStart"
    ).parquet(str(out / "output"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    landing = work / "landing"
    print(f"generating {args.events:,} events over {args.keys} keys in {args.files} files ...", flush=True)
    generate_events(landing, args.events, args.keys, args.files, seed=1, late_fraction=0.001)
    spark = build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "4g",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.sql.streaming.minBatchesToRetain": "20",
        },
    )

    def tidemark_run(out: Path) -> float:
        out.mkdir(parents=True)
        batch_ms: list[int] = []
        config = load_config(
            write_config(
                out,
                spark={"shuffle_partitions": 4},
                source={"path": str(landing), "max_files_per_trigger": args.files_per_trigger},
            )
        )
        run_pipeline(config, available_now=True, spark=spark, on_progress=lambda p: batch_ms.append(p["batchDuration"]))
        return sum(batch_ms) / 1000

    def batch_job(out: Path) -> float:
        started = time.perf_counter()
        plain_batch(spark, landing, out)
        return time.perf_counter() - started

    jobs: dict[str, Callable[[Path], float]] = {
        "tidemark": tidemark_run,
        "plain-streaming": lambda out: plain_streaming(spark, landing, out, args.files_per_trigger),
        "plain-batch": batch_job,
    }
    print("warm-up round (not counted) ...", flush=True)
    for name, job in jobs.items():
        job(work / f"warmup-{name}")
    times: dict[str, list[float]] = {name: [] for name in jobs}
    processing: dict[str, list[float]] = {name: [] for name in jobs}
    for round_number in range(args.rounds):
        order = list(jobs) if round_number % 2 == 0 else list(reversed(jobs))
        for name in order:
            out = work / f"r{round_number}-{name}"
            started = time.perf_counter()
            processing[name].append(jobs[name](out))
            times[name].append(time.perf_counter() - started)
            shutil.rmtree(out, ignore_errors=True)
            print(f"round {round_number} {name}: {times[name][-1]:.1f}s ({processing[name][-1]:.1f}s in batches)")
    # End to end: the call's wall time, start-up and shut-down included. In batches: the sum of the
    # batch durations Spark reported, i.e. the throughput of a stream that runs for hours.
    print(f"\n{'job':<16} {'end-to-end s':>13} {'events/s':>10} {'in batches s':>13} {'events/s':>10}")
    medians = {name: statistics.median(values) for name, values in times.items()}
    in_batches = {name: statistics.median(values) for name, values in processing.items()}
    for name, seconds in medians.items():
        rate, batch_rate = args.events / seconds, args.events / in_batches[name]
        print(f"{name:<16} {seconds:>13.1f} {rate:>10,.0f} {in_batches[name]:>13.1f} {batch_rate:>10,.0f}")
    ratio = medians["plain-streaming"] / medians["tidemark"]
    batch_ratio = in_batches["plain-streaming"] / in_batches["tidemark"]
    print(f"\ntidemark / plain-streaming throughput ratio: end-to-end {ratio:.3f}, in batches {batch_ratio:.3f}")
    print(f"plain-streaming / plain-batch throughput ratio: {medians['plain-batch'] / medians['plain-streaming']:.3f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
