"""Throughput: the same windowed aggregation through tidemark, hand-written streaming jobs, and a batch job.

Run by hand: `.venv/bin/python benchmarks/throughput.py [--events 2000000] [--rounds 5] [--steady-rounds 5]`.
Every job runs in one process on one local[2] session, interleaved round by round, on the same generated
files; the ratios are what to compare across machines:

- tidemark / plain-streaming: the same settings (4 shuffle partitions, RocksDB, 4 files per trigger);
- tidemark-catchup / plain-batch: adaptive catch-up (`[trigger] target_batch_duration`) over the whole backlog
  against one batch job;
- tidemark-catchup / spark-defaults: against what a user writes by hand with Spark's defaults (200 shuffle
  partitions, HDFS-backed store, no trigger limit);
- plain-one-batch: the hand-written job with no trigger limit and tidemark's settings, which separates what a
  stateful stream costs over a batch job from what tidemark adds;
- plain-batch-split: the batch job with the file split tidemark's catch-up picks (balanced read tasks), the
  stricter baseline: catch-up's split helps a batch job as much.

With --steady-rounds, a second part measures steady-state batch latency after a backlog, catch-up on against
off: 40 backlog files, then 5 groups of 4 files dropped one at a time into a processing-time run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import write_config  # noqa: E402

from tidemark.config import load_config  # noqa: E402
from tidemark.config.model import HDFS_PROVIDER, ROCKSDB_PROVIDER  # noqa: E402
from tidemark.pipeline.generate import generate_events  # noqa: E402
from tidemark.pipeline.run import run_pipeline  # noqa: E402
from tidemark.session import build_session, runtime_conf  # noqa: E402
from tidemark.sources.files.catchup import FileSplit, balanced_split_bytes  # noqa: E402

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def windows(events):  # type: ignore[no-untyped-def]
    """The aggregation every hand-written job runs: 15-minute windows per user, the columns tidemark writes."""
    from pyspark.sql import functions as F

    result = events.groupBy("user", F.window("ts", "15 minutes")).agg(
        F.min("ts").alias("firstEventTime"),
        F.max("ts").alias("lastEventTime"),
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("value_sum"),
    )
    return result.select(
        "user",
        F.col("window.start").alias("windowStart"),
        F.col("window.end").alias("windowEnd"),
        "firstEventTime",
        "lastEventTime",
        "count",
        "value_sum",
    )


def plain_streaming(spark, landing: Path, out: Path, files_per_trigger: int | None) -> float:  # type: ignore[no-untyped-def]
    """What a careful user writes by hand: same source, watermark, window, sink and state store."""
    from pyspark.sql import functions as F

    reader = spark.readStream.schema(SCHEMA)
    if files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    events = (
        reader.json(str(landing))
        .withColumn("ts", F.to_timestamp("ts"))
        .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
        .withWatermark("ts", "10 minutes")
    )
    query = (
        windows(events)
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
    # The same output as the streaming jobs: selecting fewer columns would let Spark prune min/max away.
    windows(events).write.partitionBy("windowStart").parquet(str(out / "output"))


SPARK_DEFAULTS = {"spark.sql.shuffle.partitions": "200", "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER}


def spread(values: list[float]) -> str:
    """median [min-max]"""
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def steady_round(spark, files: list[Path], backlog: int, group: int, work: Path, target: str | None) -> list[float]:  # type: ignore[no-untyped-def]
    """Batch durations (ms) of steady batches after a backlog: `backlog` files waiting, then groups of `group`."""
    landing = work / "landing"
    landing.mkdir(parents=True)
    for file in files[:backlog]:
        shutil.copy2(file, landing / file.name)
    trigger: dict[str, object] = {"mode": "processing-time", "interval": "2 seconds"}
    if target:
        trigger["target_batch_duration"] = target
    config = load_config(
        write_config(
            work,
            spark={"shuffle_partitions": 4},
            source={"path": str(landing), "max_files_per_trigger": group},
            trigger=trigger,
        )
    )
    rows = [_lines(f) for f in files]
    seen: list[dict[str, int]] = []
    stop = threading.Event()
    done = threading.Event()
    steady_index: list[int] = []

    def progress(p: dict[str, object]) -> None:
        seen.append({"rows": int(p["numInputRows"]), "ms": int(p["batchDuration"])})  # type: ignore[call-overload]

    def read_rows() -> int:
        return sum(item["rows"] for item in list(seen))

    def feed() -> None:
        deadline = time.monotonic() + 1800
        expected = sum(rows[:backlog])
        while time.monotonic() < deadline and read_rows() < expected:
            time.sleep(0.1)
        first_steady = len(seen)  # progress events from here on belong to the steady groups
        for start in range(backlog, len(files), group):
            time.sleep(1.0)  # let the trigger go idle: a group arrives between batches, as in steady state
            for file in files[start : start + group]:
                target_path = landing / file.name
                shutil.copy2(file, target_path)
                os.utime(target_path)
            expected += sum(rows[start : start + group])
            while time.monotonic() < deadline and read_rows() < expected:
                time.sleep(0.05)
        steady_index.append(first_steady)
        done.set()
        stop.set()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    run_pipeline(config, spark=spark, stop=stop, on_progress=progress)
    feeder.join(timeout=60)
    if not done.is_set() or not steady_index:
        msg = "the steady part did not finish"
        raise RuntimeError(msg)
    return [float(item["ms"]) for item in seen[steady_index[0] :] if item["rows"] > 0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the backlog")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--files", type=int, default=40, help="files in the backlog")
    parser.add_argument("--files-per-trigger", type=int, default=4, help="the steady-state size")
    parser.add_argument("--target", default="2 minutes", help="[trigger] target_batch_duration of tidemark-catchup")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steady-rounds", type=int, default=0, help="rounds of the steady-state latency part")
    parser.add_argument("--steady-groups", type=int, default=5, help="groups of files-per-trigger files dropped")
    parser.add_argument("--skip", default="", help="comma-separated jobs to leave out")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    extra = args.steady_groups * args.files_per_trigger if args.steady_rounds else 0
    total_files = args.files + extra
    total_events = args.events * total_files // args.files
    print(f"generating {total_events:,} events over {args.keys} keys in {total_files} files ...", flush=True)
    generated = generate_events(
        work / "all",
        total_events,
        args.keys,
        total_files,
        seed=1,
        late_fraction=0.001,
        span=timedelta(hours=6) * total_files / args.files,
    )
    landing = work / "landing"
    landing.mkdir()
    for file in generated.files[: args.files]:
        os.link(file, landing / file.name)
    backlog_events = sum(_lines(f) for f in generated.files[: args.files])
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
    batches: dict[str, list[int]] = {}
    last_batch_ms: dict[str, list[int]] = {}  # each tidemark run's batch durations, printed with its round

    def tidemark_run(out: Path, name: str, target: str | None) -> float:
        out.mkdir(parents=True)
        batch_ms: list[int] = []
        trigger = {"target_batch_duration": target} if target else {}
        config = load_config(
            write_config(
                out,
                spark={"shuffle_partitions": 4},
                source={"path": str(landing), "max_files_per_trigger": args.files_per_trigger},
                trigger=trigger,
            )
        )
        data: list[int] = []

        def progress(p: dict[str, Any]) -> None:
            batch_ms.append(p["batchDuration"])
            if p["numInputRows"]:
                data.append(p["numInputRows"])

        run_pipeline(config, available_now=True, spark=spark, on_progress=progress)
        if sum(data) != backlog_events:
            msg = f"{name} read {sum(data)} rows, not {backlog_events}"
            raise RuntimeError(msg)
        batches.setdefault(name, []).append(len(data))
        last_batch_ms[name] = batch_ms
        return sum(batch_ms) / 1000

    def batch_job(out: Path) -> float:
        started = time.perf_counter()
        plain_batch(spark, landing, out)
        return time.perf_counter() - started

    # The batch job with the file split tidemark's catch-up gives its query (the stricter baseline).
    split = balanced_split_bytes([f.stat().st_size for f in landing.iterdir()], 2, FileSplit())
    print(f"balanced split for the backlog on 2 slots: {split} bytes (None: Spark's own)", flush=True)

    def batch_job_split(out: Path) -> float:
        with runtime_conf(spark, {"spark.sql.files.maxPartitionBytes": str(split)} if split else {}):
            return batch_job(out)

    def spark_defaults(out: Path) -> float:
        with runtime_conf(spark, SPARK_DEFAULTS):
            return plain_streaming(spark, landing, out, None)

    jobs: dict[str, Callable[[Path], float]] = {
        "tidemark": lambda out: tidemark_run(out, "tidemark", None),
        "tidemark-catchup": lambda out: tidemark_run(out, "tidemark-catchup", args.target),
        "plain-streaming": lambda out: plain_streaming(spark, landing, out, args.files_per_trigger),
        # The hand-written job with no trigger limit but tidemark's settings: the catch-up a careful user writes.
        "plain-one-batch": lambda out: plain_streaming(spark, landing, out, None),
        "spark-defaults": spark_defaults,
        "plain-batch": batch_job,
        "plain-batch-split": batch_job_split,
    }
    for name in filter(None, args.skip.split(",")):
        jobs.pop(name)
    print("warm-up round (not counted) ...", flush=True)
    for name, job in jobs.items():
        job(work / f"warmup-{name}")
    batches.clear()
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
            durations = f", batches ms {last_batch_ms.pop(name)}" if name in last_batch_ms else ""
            took = f"{times[name][-1]:.1f}s ({processing[name][-1]:.1f}s in batches{durations})"
            print(f"round {round_number} {name}: {took}")
    # End to end: the call's wall time, start-up and shut-down included. In batches: the sum of the
    # batch durations Spark reported, i.e. the throughput of a stream that runs for hours.
    print(f"\n{'job':<18} {'end-to-end s':>13} {'events/s':>10} {'in batches s':>13} {'events/s':>10}  data batches")
    for name in jobs:
        seconds, in_batches = statistics.median(times[name]), statistics.median(processing[name])
        rate, batch_rate = args.events / seconds, args.events / in_batches
        counted = ",".join(str(b) for b in sorted(set(batches.get(name, [])))) or "-"
        print(f"{name:<18} {seconds:>13.1f} {rate:>10,.0f} {in_batches:>13.1f} {batch_rate:>10,.0f}  {counted}")
    print("\nthroughput ratios, per round, median [min-max]:")
    pairs = [
        ("tidemark", "plain-streaming"),
        ("tidemark-catchup", "plain-batch"),
        ("tidemark-catchup", "plain-batch-split"),
        ("plain-batch-split", "plain-batch"),
        ("tidemark-catchup", "spark-defaults"),
        ("tidemark-catchup", "tidemark"),
        ("tidemark-catchup", "plain-one-batch"),
        ("plain-one-batch", "plain-batch"),
        ("plain-streaming", "plain-batch"),
    ]
    for job, base in pairs:
        if job in jobs and base in jobs:
            end = [b / t for t, b in zip(times[job], times[base], strict=True)]
            inb = [b / t for t, b in zip(processing[job], processing[base], strict=True)]
            print(f"  {job} / {base}: end-to-end {spread(end)}, in batches {spread(inb)}")

    if args.steady_rounds:
        print("\nsteady state: batch ms of the groups after the backlog, catch-up off vs on", flush=True)
        steady: dict[str, list[float]] = {"off": [], "on": []}
        ratios: list[float] = []
        for round_number in range(args.steady_rounds):
            order = ["off", "on"] if round_number % 2 == 0 else ["on", "off"]
            medians: dict[str, float] = {}
            for variant in order:
                durations = steady_round(
                    spark,
                    list(generated.files),
                    args.files,
                    args.files_per_trigger,
                    work / f"steady-{round_number}-{variant}",
                    args.target if variant == "on" else None,
                )
                medians[variant] = statistics.median(durations)
                steady[variant].extend(durations)
                shutil.rmtree(work / f"steady-{round_number}-{variant}", ignore_errors=True)
                print(f"round {round_number} catch-up {variant}: {[round(d) for d in durations]} ms")
            ratios.append(medians["on"] / medians["off"])
        print(f"steady batch ms, catch-up off: {spread(steady['off'])}; on: {spread(steady['on'])}")
        print(f"steady batch time on / off, per round: {spread(ratios)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
