"""One probe of the breaking-point benchmark: a fresh local[2] JVM grows a stateful aggregation to N keys.

Run by benchmarks/planner_break.py as `python benchmarks/_break_child.py SPEC_JSON OUT_JSON`, one process per
probe, because the heap (spark.driver.memory) is fixed when the JVM starts. The query: a rate-micro-batch
source of `batch_rows` rows per batch, key id = value % keys, so the first ceil(keys / batch_rows) batches
each add new keys and the `extra_batches` after them update existing keys (the steady state of a query whose
key space stopped growing). The key is one string (`small`) or four columns (`wide`); the value is a count
(`small`) or six aggregates (`wide`). With `measure_heap`, each batch runs through foreachBatch and ends with
two System.gc() calls and a reading of the live heap, so the state's resident bytes are measured between
batches (the calibration runs); otherwise the sink is noop (the probes).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# A JVM that spends this share of a minute in GC pauses makes no progress: counted as a break, like the
# GC overhead limit of the parallel collector (G1 has none and can thrash for a long time before it throws).
THRASH_GC_SHARE = 0.9
THRASH_WINDOW_S = 60.0


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, from /proc."""
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return rss, hwm


def _session(spec: dict[str, Any]) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    java_options = " ".join(spec.get("java_options", []))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("planner-break")
        .config("spark.driver.memory", spec["heap"])
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(spec.get("partitions", 2)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.providerClass", HDFS if spec["store"] == "hdfs" else ROCKSDB)
    )
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if spec["store"] == "rocksdb":
        builder = builder.config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        if spec.get("bounded_mb"):
            builder = builder.config("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage", "true")
            builder = builder.config("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", str(spec["bounded_mb"]))
    for key, value in spec.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _query(spark: Any, spec: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    keys = int(spec["keys"])
    events = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", int(spec["batch_rows"]))
        .option("numPartitions", 2)
        .load()
        .withColumn("id", F.col("value") % keys)
    )
    if spec["key_shape"] == "small":
        grouping = [F.concat(F.lit("k"), F.col("id").cast("string")).alias("k")]
    else:
        grouping = [
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("k"),
            (F.col("id") % 1000).cast("int").alias("k_int"),
            (F.col("id") * 7).alias("k_long"),
            F.concat(F.lit("region-"), (F.col("id") % 97).cast("string")).alias("k_region"),
        ]
    if spec["value_shape"] == "small":
        aggregates = [F.count(F.lit(1)).alias("n")]
    else:
        aggregates = [
            F.count(F.lit(1)).alias("n"),
            F.sum("value").alias("total"),
            F.min("value").alias("low"),
            F.max("value").alias("high"),
            F.avg("value").alias("mean"),
            F.max("timestamp").alias("last_seen"),
        ]
    return events.groupBy(*grouping).agg(*aggregates)


def run(spec: dict[str, Any], out: Path) -> None:
    """Grow the state batch by batch; write what each batch reported (and measured) to out as it goes."""
    spark = _session(spec)
    jvm = spark.sparkContext._jvm
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    runtime = jvm.java.lang.Runtime.getRuntime()
    collectors = list(jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans())

    def gc_ms() -> int:
        return sum(int(c.getCollectionTime()) for c in collectors)

    memory_bean = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    growth_batches = math.ceil(int(spec["keys"]) / int(spec["batch_rows"]))
    total_batches = growth_batches + int(spec.get("extra_batches", 0))
    record: dict[str, Any] = {
        "spec": spec,
        "jvm_pid": jvm_pid,
        "jvm_max_memory": int(runtime.maxMemory()),
        "outcome": "running",
        "batches": [],
        "heap": [],
        "rss": [],
    }

    def save() -> None:
        out.write_text(json.dumps(record))

    def live_heap() -> int:
        jvm.java.lang.System.gc()
        jvm.java.lang.System.gc()
        return int(memory_bean.getHeapMemoryUsage().getUsed())

    record["baseline_heap"] = live_heap() if spec.get("measure_heap") else None
    record["baseline_rss_kib"] = _rss_kib(jvm_pid)[0]
    save()
    frame = _query(spark, spec)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as ckpt:
        writer = frame.writeStream.outputMode("update").option("checkpointLocation", ckpt)
        if spec.get("measure_heap"):

            def each_batch(batch: Any, batch_id: int) -> None:
                batch.write.format("noop").mode("overwrite").save()
                record["heap"].append({"batch": batch_id, "live_heap": live_heap()})
                record["rss"].append({"batch": batch_id, "rss_kib": _rss_kib(jvm_pid)[0]})
                save()

            writer = writer.foreachBatch(each_batch)
        else:
            writer = writer.format("noop")
        query = writer.trigger(processingTime="0 seconds").start()
        gc_samples: list[tuple[float, int]] = []
        try:
            while True:
                if query.exception() is not None:
                    record["outcome"] = f"failed: {str(query.exception())[:400]}"
                    break
                progress = query.lastProgress
                _rss, hwm = _rss_kib(jvm_pid)
                record["rss_hwm_kib"] = hwm
                now = time.monotonic()
                gc_samples.append((now, gc_ms()))
                # Compare with the newest sample at least a window old: calls into a thrashing JVM block for
                # seconds, so samples can be sparse.
                older = [sample for sample in gc_samples if sample[0] <= now - THRASH_WINDOW_S]
                if older:
                    then, gc_then = older[-1]
                    span = now - then
                    share = (gc_samples[-1][1] - gc_then) / 1000 / span
                    record["max_gc_share"] = max(record.get("max_gc_share", 0.0), share)
                    if share >= THRASH_GC_SHARE:
                        record["outcome"] = (
                            f"failed: GC thrash ({share:.0%} of the last {span:.0f} s in GC pauses, "
                            f"batch {progress['batchId'] + 1 if progress else 0} of {total_batches})"
                        )
                        break
                if progress is not None and progress["batchId"] >= total_batches - 1:
                    record["outcome"] = "ok"
                    break
                time.sleep(0.5)
        finally:
            record["seconds"] = time.monotonic() - started
            record["batches"] = [
                {
                    "batch": p["batchId"],
                    "ms": p["batchDuration"],
                    "rows": p["stateOperators"][0]["numRowsTotal"],
                    "updated": p["stateOperators"][0]["numRowsUpdated"],
                    "memory_used_bytes": p["stateOperators"][0]["memoryUsedBytes"],
                    "current_version_bytes": p["stateOperators"][0]["customMetrics"].get(
                        "stateOnCurrentVersionSizeBytes", 0
                    ),
                    "custom": {
                        k: v
                        for k, v in p["stateOperators"][0]["customMetrics"].items()
                        if k.startswith(("rocksdbPinnedBlocksMemoryUsage", "rocksdbTotalSize", "rocksdbSst"))
                        or "Memory" in k
                    },
                }
                for p in query.recentProgress
            ]
            save()
            if record["outcome"] != "ok":
                # A thrashing or dying JVM can take many minutes to stop the query: the verdict is in, so end
                # it now (this process started it) and leave without waiting.
                os.kill(jvm_pid, signal.SIGKILL)
                os._exit(0)
            query.stop()
    spark.stop()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]), Path(sys.argv[2]))
