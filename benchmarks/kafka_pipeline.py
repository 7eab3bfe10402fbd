"""Kafka: tidemark against a hand-written PySpark Kafka job, and its catch-up against a batch read of the topic.

Run by hand: `.venv/bin/python benchmarks/kafka_pipeline.py [--records 1000000] [--rounds 5]` (needs `make kafka`).
A real broker (tests/kafka_broker.py) is started on loopback and 1 M JSON records (1,000 keys, 1 % malformed) are
preloaded once on 4 partitions. Every job then reads the whole topic from the earliest offsets into a fresh
checkpoint and output, in one process on one local[2] session (the Kafka connector from tidemark's jar cache),
interleaved round by round, so the ratios compare like with like on a shared machine:

- tidemark / hand-written: the same settings (4 shuffle partitions, RocksDB + changelog, maxOffsetsPerTrigger
  --per-trigger); the hand-written job parses the JSON value the same way (from_json, PERMISSIVE, a corrupt-record
  column), writes the same windows to Parquet and the malformed records to a JSON quarantine (a second query on
  the same source, as a user writes it);
- tidemark-catchup / batch: `[trigger] target_batch_duration` over the backlog (steady size --steady records per
  trigger) against one batch read of the topic with the same parse, aggregation, sink and quarantine;
- tidemark-steady: the backlog at the steady size without catch-up (left out with --skip tidemark-steady);
- tidemark-catchup-reread: tidemark-catchup with the quarantine's records not carried by the stream (its bound at
  0 characters), so every batch with malformed records is read again: how tidemark quarantined before, and how it
  still does on Spark 3.5 or a session without its JVM helper.

Every tidemark job checks it read exactly the preloaded records and quarantined exactly the malformed ones.

End to end is each job's wall time in the shared session (the JVM's start is paid once, by the warm-up).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import write_config  # noqa: E402
from tests.kafka_broker import KafkaBroker, start_broker  # noqa: E402
from tests.kafka_data import make_events, produce  # noqa: E402

from tidemark.config import load_config  # noqa: E402
from tidemark.config.model import ROCKSDB_PROVIDER  # noqa: E402
from tidemark.pipeline import quarantine  # noqa: E402
from tidemark.pipeline.run import run_pipeline  # noqa: E402
from tidemark.session import build_session  # noqa: E402
from tidemark.spark.artifacts import JarFeature  # noqa: E402
from tidemark.spark.jars import fetch  # noqa: E402
from tidemark.spark.jvm import session_jar  # noqa: E402

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"
TOPIC = "bench"


def parsed_events(frame):  # type: ignore[no-untyped-def]
    """The Kafka value parsed as tidemark parses it: JSON with a corrupt-record column, the event time cast."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from tidemark.schema import parse_ddl

    schema = parse_ddl(SCHEMA)
    with_corrupt = StructType([*schema.fields, StructField("_corrupt_record", StringType(), True)])
    line = F.col("value").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    parsed = frame.select(
        F.from_json(line, with_corrupt, options).alias("r"),
        line.alias("raw"),
        F.concat_ws("/", "topic", F.col("partition").cast("string"), F.col("offset").cast("string")).alias("source"),
    ).select("r.*", "raw", "source")
    parsed = parsed.withColumn("ts", F.try_to_timestamp(F.col("ts")))
    bad = F.col("_corrupt_record").isNotNull() | F.col("raw").isNull() | F.col("ts").isNull() | F.col("user").isNull()
    return parsed.withColumn("_bad", bad)


def windows(events):  # type: ignore[no-untyped-def]
    """The aggregation tidemark writes: 15-minute windows per user."""
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


def hand_written(spark, bootstrap: str, out: Path, per_trigger: int | None) -> float:  # type: ignore[no-untyped-def]
    """What a careful user writes by hand: one stream to the windows, one to the quarantine, same settings."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", per_trigger)
    events = parsed_events(reader.load())
    good = events.where(~F.col("_bad")).select("user", "ts", "value").withWatermark("ts", "10 minutes")
    sink = (
        windows(good)
        .writeStream.format("parquet")
        .option("path", str(out / "output"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .partitionBy("windowStart")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    bad = (
        events.where(F.col("_bad"))
        .select("source", "raw")
        .writeStream.format("json")
        .option("path", str(out / "quarantine"))
        .option("checkpointLocation", str(out / "checkpoint-quarantine"))
        .trigger(availableNow=True)
        .start()
    )
    sink.awaitTermination()
    bad.awaitTermination()
    return sum(p["batchDuration"] for p in sink.recentProgress) / 1000


def batch_job(spark, bootstrap: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    """The same windows, and the same quarantine, from one batch read of the whole topic."""
    from pyspark.sql import functions as F

    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    events = parsed_events(raw).cache()
    windows(events.where(~F.col("_bad"))).write.partitionBy("windowStart").parquet(str(out / "output"))
    events.where(F.col("_bad")).select("source", "raw").write.json(str(out / "quarantine"))
    events.unpersist()


def spread(values: list[float]) -> str:
    """median [min-max]"""
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def load() -> str:
    """The machine's load averages, to print beside every number."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f}"


def preload(broker: KafkaBroker, records: int) -> int:
    """Produce the records once; return how many are malformed."""
    broker.create_topic(TOPIC, partitions=4)
    produced = 0
    malformed = 0
    chunk = 100_000
    for start in range(0, records, chunk):
        count = min(chunk, records - start)
        events = make_events(count, keys=1000, seed=start, malformed_fraction=0.01, first_id=start)
        events = events[:count]
        malformed += sum(1 for e in events if e.malformed)
        produce(broker, TOPIC, events)
        produced += len(events)
    ends = broker.end_offsets(TOPIC)
    assert sum(ends.values()) == produced == records, (ends, produced)
    return malformed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--per-trigger", type=int, default=250_000, help="maxOffsetsPerTrigger, tidemark vs hand")
    parser.add_argument("--steady", type=int, default=20_000, help="the steady size of the catch-up comparison")
    parser.add_argument("--target", default="2 minutes", help="[trigger] target_batch_duration of tidemark-catchup")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip", default="", help="comma-separated jobs to leave out")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidemark-kafka-bench-"))
    broker = start_broker(work / "broker")
    try:
        started = time.perf_counter()
        malformed = preload(broker, args.records)
        print(f"preloaded {args.records:,} records ({malformed:,} malformed) in {time.perf_counter() - started:.0f}s")
        run(args, work, broker.bootstrap, malformed)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def kafka_session() -> Any:
    """The benchmark's one session: local[2], 4 shuffle partitions, RocksDB + changelog, the Kafka connector and
    tidemark's JVM helper (as `tidemark run` starts a Kafka pipeline's session)."""
    helper = session_jar()
    jars = [*fetch([JarFeature.KAFKA]).paths, *([helper] if helper is not None else [])]
    return build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "4g",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.jars": ",".join(str(p) for p in jars),
        },
    )


def run(args: argparse.Namespace, work: Path, bootstrap: str, malformed: int) -> None:
    """Warm up, then the interleaved rounds, then the table and the ratios."""
    spark = kafka_session()
    batches: dict[str, list[int]] = {}

    def tidemark_run(out: Path, name: str, per_trigger: int, target: str | None) -> float:
        out.mkdir(parents=True)
        source = {
            "format": "kafka",
            "path": None,
            "max_files_per_trigger": None,
            "bootstrap_servers": bootstrap,
            "topic": TOPIC,
            "max_offsets_per_trigger": per_trigger,
        }
        trigger = {"target_batch_duration": target} if target else {}
        config = load_config(write_config(out, spark={"shuffle_partitions": 4}, source=source, trigger=trigger))
        rows: list[int] = []
        batch_ms: list[int] = []

        def progress(p: dict[str, Any]) -> None:
            batch_ms.append(p["batchDuration"])
            if p["numInputRows"]:
                rows.append(p["numInputRows"])

        carried = quarantine.INLINE_CHARS
        quarantine.INLINE_CHARS = 0 if name.endswith("-reread") else carried
        try:
            run_pipeline(config, available_now=True, spark=spark, on_progress=progress)
        finally:
            quarantine.INLINE_CHARS = carried
        if sum(rows) != args.records:
            msg = f"{name} read {sum(rows)} records, not {args.records}"
            raise RuntimeError(msg)
        written = sum(1 for _ in quarantine.iter_quarantine(str(out / "quarantine")))
        if written != malformed:
            msg = f"{name} quarantined {written} records, not {malformed}"
            raise RuntimeError(msg)
        batches.setdefault(name, []).append(len(rows))
        print(f"  {name} batch durations (ms, Spark's): {batch_ms}", flush=True)
        return sum(batch_ms) / 1000

    def timed_batch(out: Path) -> float:
        started = time.perf_counter()
        batch_job(spark, bootstrap, out)
        return time.perf_counter() - started

    jobs: dict[str, Callable[[Path], float]] = {
        "tidemark": lambda out: tidemark_run(out, "tidemark", args.per_trigger, None),
        "hand-written": lambda out: hand_written(spark, bootstrap, out, args.per_trigger),
        "tidemark-catchup": lambda out: tidemark_run(out, "tidemark-catchup", args.steady, args.target),
        "batch": timed_batch,
        "tidemark-steady": lambda out: tidemark_run(out, "tidemark-steady", args.steady, None),
        "tidemark-catchup-reread": lambda out: tidemark_run(out, "tidemark-catchup-reread", args.steady, args.target),
    }
    for name in filter(None, args.skip.split(",")):
        jobs.pop(name)
    print(f"warm-up round (not counted), {load()} ...", flush=True)
    for name, job in jobs.items():
        job(work / f"warmup-{name}")
        shutil.rmtree(work / f"warmup-{name}", ignore_errors=True)
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
            print(f"round {round_number} {name}: {times[name][-1]:.1f}s ({load()})", flush=True)
    print(f"\n{'job':<24} {'end-to-end s':>13} {'records/s':>10}  data batches")
    for name in jobs:
        seconds = statistics.median(times[name])
        counted = ",".join(str(b) for b in sorted(set(batches.get(name, [])))) or "-"
        print(f"{name:<24} {seconds:>13.1f} {args.records / seconds:>10,.0f}  {counted}")
    print(f"\nthroughput ratios (base time / job time), per round, median [min-max]; {load()}:")
    for job, base in [
        ("tidemark", "hand-written"),
        ("tidemark-catchup", "batch"),
        ("tidemark-catchup", "tidemark-steady"),
        ("tidemark-catchup-reread", "batch"),
        ("tidemark-catchup-reread", "tidemark-catchup"),
        ("hand-written", "batch"),
    ]:
        if job in jobs and base in jobs:
            end = [b / t for t, b in zip(times[job], times[base], strict=True)]
            print(f"  {job} / {base}: {spread(end)}")


if __name__ == "__main__":
    main()
