"""Benchmark: tidemark's state store defaults against the HDFS-backed store (and the other RocksDB setups).

Workload: a streaming aggregation (count and sum per key) over the `rate-micro-batch` source, which gives
exactly `keys` rows per batch; row i has key i % keys, so every batch updates every key once. Per key count, the
setups run in interleaved rounds (order reversed every other round) in one Spark session (local[2]); per run:
the median steady batch duration (batch 0 creates the keys and is reported apart), the JVM's CPU per batch
(split into task threads, GC, RocksDB's background threads, the rest), the state operator's commit and update
times and RocksDB's custom metrics, the state memory, the JVM heap after a full GC at the end of the run and
the JVM's resident memory, and the checkpoint size. Ratios are to the HDFS-backed store in the same round.

`tidemark` is whatever `[checkpoint]` defaults tidemark gives a window pipeline today (read from the code);
`rocksdb+changelog` is the default before issue 17. With --log FILE every batch's progress is also written as a
tidemark progress log, so `tidemark plan checkpoint FILE` compares the stores from it.

Run by hand:  .venv/bin/python benchmarks/state_store.py --keys 10000,100000,1000000 --rounds 5
A larger size in its own process (heap for the HDFS-backed store):
              .venv/bin/python benchmarks/state_store.py --keys 10000000 --rounds 1 --batches 4 --driver-memory 12g
`NAME@MB` is a setup with RocksDB's bounded memory at MB (its own process: the bound is one per JVM), e.g.
              .venv/bin/python benchmarks/state_store.py --keys 10000000 --setups tidemark@1024 --rounds 1 --batches 4
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tidemark.compat import UTC

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))

from tests.helpers import BASE_CONFIG  # noqa: E402

from _stream_bench import SETUPS, apply_conf, folder_stats, markdown_table, restore_conf, session  # noqa: E402
from tidemark.config import parse_config  # noqa: E402

TIDEMARK_DEFAULT = "tidemark"
BASELINE = "hdfs"
_TICK = os.sysconf("SC_CLK_TCK")
_NOT_WORD = re.compile(r"\W")
_THREAD_GROUPS = (
    ("Executor task", "tasks"),
    ("GC Thread", "gc"),
    ("G1 ", "gc"),
    ("VM Thread", "gc"),
    ("rocksdb", "rocksdb-background"),
    ("C2 Compiler", "jit"),
    ("C1 Compiler", "jit"),
)


# What `tidemark run` sized at this process's start (plan_start), kept for the report; set by main().
START: dict[str, Any] = {}


def tidemark_state_conf(driver_memory: str = "3g", partitions: int = 2) -> dict[str, str]:
    """The state store settings `tidemark run` gives a window pipeline with nothing configured in [checkpoint]:
    the provider of a new checkpoint and RocksDB's cap, sized as at a run's start (before this JVM starts)."""
    from tidemark.sizing.store_start import plan_start

    tables = {k: dict(v) for k, v in BASE_CONFIG.items()}
    tables["spark"] = {**tables["spark"], "driver_memory": driver_memory, "shuffle_partitions": partitions}
    # A checkpoint that does not exist yet: what a first run sees.
    tables["checkpoint"] = {"location": str(Path(tempfile.gettempdir()) / f"tidemark-bench-new-{time.time_ns()}")}
    config = parse_config(tables, base=Path(tempfile.gettempdir()))
    start = plan_start(config)
    START.update(start.as_record())
    return {k: v for k, v in start.config.spark_conf().items() if k.startswith("spark.sql.streaming.stateStore.")}


def all_setups() -> dict[str, dict[str, str]]:
    """Every setup this benchmark knows: the shared ones plus tidemark's current defaults."""
    if TIDEMARK_DEFAULT not in _SIZED:
        _SIZED[TIDEMARK_DEFAULT] = tidemark_state_conf()
    return {**SETUPS, **_SIZED}


_SIZED: dict[str, dict[str, str]] = {}


def setup_conf(setup: str) -> dict[str, str]:
    """A named setup's settings; `NAME@MB` is that setup with RocksDB's bounded memory set to MB, `NAME@unbounded`
    without a bound, `NAME+key=value` adds one RocksDB setting (e.g. `tidemark+blockSizeKB=16`).

    RocksDB reads the bound once per JVM (one cache for every instance), so a `@MB` setup must be the only
    RocksDB setup of its process: run it with `--setups hdfs,tidemark@1024` or alone.
    """
    base, *extras = setup.split("+") if setup != "rocksdb+changelog" else [setup]
    name, _, bound = base.partition("@")
    conf = dict(all_setups()[name])
    if bound == "unbounded":
        conf.pop("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage", None)
        conf.pop("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", None)
    elif bound:
        conf["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] = "true"
        conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] = str(int(bound))
    for extra in extras:
        key, _, value = extra.partition("=")
        conf[f"spark.sql.streaming.stateStore.rocksdb.{key}"] = value
    return conf


class Jvm:
    """CPU, memory and heap of the session's JVM (local mode: driver and executor are one process)."""

    def __init__(self, spark: Any) -> None:
        self.jvm = spark.sparkContext._jvm
        self.pid = int(self.jvm.java.lang.ProcessHandle.current().pid())

    def threads_cpu(self) -> collections.Counter[str]:
        """CPU seconds so far by thread group of the live threads, and the whole process's under "process" (which
        keeps the CPU of threads that ended: Spark replaces task threads, so live threads alone can go back)."""
        groups: collections.Counter[str] = collections.Counter()
        raw = Path(f"/proc/{self.pid}/stat").read_text()
        fields = raw.rsplit(")", 1)[1].split()
        groups["process"] = (int(fields[11]) + int(fields[12])) / _TICK
        for stat in glob.glob(f"/proc/{self.pid}/task/*/stat"):
            try:
                raw = Path(stat).read_text()
            except OSError:
                continue
            name = raw[raw.index("(") + 1 : raw.rindex(")")]
            fields = raw.rsplit(")", 1)[1].split()
            seconds = (int(fields[11]) + int(fields[12])) / _TICK
            group = next((g for prefix, g in _THREAD_GROUPS if name.startswith(prefix)), "other")
            groups[group] += seconds
        return groups

    def rss_mb(self) -> float:
        """Resident memory of the JVM (heap, native memory of RocksDB, everything)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    def heap_after_gc_mb(self) -> float:
        """Used heap after a full collection: what the JVM really holds."""
        runtime = self.jvm.java.lang.Runtime.getRuntime()
        self.jvm.java.lang.System.gc()
        return float(runtime.totalMemory() - runtime.freeMemory()) / 1024**2


def _state_metric(progress: dict[str, Any], name: str) -> float:
    return float(sum(op.get(name, 0) for op in progress.get("stateOperators", [])))


def _custom(progress: dict[str, Any], name: str) -> float:
    return float(sum(op.get("customMetrics", {}).get(name, 0) for op in progress.get("stateOperators", [])))


def _write_log(log: Path | None, setup: str, progress: list[dict[str, Any]]) -> None:
    if log is None:
        return
    with log.open("a", encoding="utf-8") as handle:
        for p in progress:
            line = {"type": "progress", "time": datetime.now(UTC).isoformat(), "run_id": p["runId"], "progress": p}
            line["setup"] = setup
            handle.write(json.dumps(line) + "\n")


def measure(
    spark: Any, jvm: Jvm, setup: str, keys: int, batches: int, work: Path, timeout: float, log: Path | None = None
) -> dict[str, Any]:
    """Run one setup for `batches` batches of `keys` rows; return its measurements."""
    from pyspark.sql import functions as F

    checkpoint = work / f"{setup}-{keys}-{time.time_ns()}"
    previous = apply_conf(spark, setup_conf(setup))
    marks: dict[int, tuple[float, collections.Counter[str]]] = {}
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
            .queryName(f"bench_{_NOT_WORD.sub('_', setup)}_{keys}")
            .start()
        )
        deadline = time.monotonic() + timeout
        while len([b for b in marks if b < batches]) < batches:
            if time.monotonic() > deadline:
                msg = f"{setup} at {keys} keys: {len(marks)} of {batches} batches within {timeout:.0f}s"
                raise RuntimeError(msg)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            last = query.lastProgress
            if last is not None and last["batchId"] not in marks:
                marks[last["batchId"]] = (jvm.rss_mb(), jvm.threads_cpu())
            time.sleep(0.02)
        heap = jvm.heap_after_gc_mb()  # state still loaded: the query runs until stopped
        query.stop()
        wall = time.perf_counter() - started
        progress = {p["batchId"]: p for p in (json.loads(q.json) for q in query.recentProgress)}
    finally:
        restore_conf(spark, previous)
    ordered = [progress[b] for b in range(batches)]
    _write_log(log, setup, ordered)
    rows_total = _state_metric(ordered[-1], "numRowsTotal")
    rows_updated = _state_metric(ordered[-1], "numRowsUpdated")
    if rows_updated != keys or rows_total not in (0, keys):  # 0: the store does not count (trackTotalNumberOfRows)
        msg = f"{setup}: last batch updated {rows_updated:.0f} of {keys} keys, state holds {rows_total:.0f} rows"
        raise RuntimeError(msg)
    steady = ordered[1:]
    first, end = 1, batches - 1
    cpu = {g: (marks[end][1][g] - marks[first][1].get(g, 0)) * 1000 / (end - first) for g in marks[end][1]}
    process_cpu = cpu.pop("process")
    files, size = folder_stats(checkpoint / "state")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return {
        "setup": setup,
        "keys": keys,
        "batches": batches,
        "wall_s": wall,
        "first_batch_ms": float(ordered[0]["batchDuration"]),
        "batch_ms": statistics.median(float(p["batchDuration"]) for p in steady),
        "cpu_ms": process_cpu,
        "cpu_by_threads_ms": {g: round(v) for g, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 1},
        "updates_ms": statistics.median(_state_metric(p, "allUpdatesTimeMs") for p in steady),
        "commit_ms": statistics.median(_state_metric(p, "commitTimeMs") for p in steady),
        "rocksdb_get_ms": statistics.median(_custom(p, "rocksdbGetLatency") for p in steady),
        "rocksdb_put_ms": statistics.median(_custom(p, "rocksdbPutLatency") for p in steady),
        "rocksdb_gets": statistics.median(_custom(p, "rocksdbGetCount") for p in steady),
        "rocksdb_cache_miss_share": statistics.median(
            _custom(p, "rocksdbReadBlockCacheMissCount") / max(1.0, _custom(p, "rocksdbGetCount")) for p in steady
        ),
        "rocksdb_sst_bytes": _custom(ordered[-1], "rocksdbSstFileSize"),
        "rocksdb_cap_mb": float(setup_conf(setup).get("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", 0)),
        "memory_bytes": _state_metric(ordered[-1], "memoryUsedBytes"),
        "heap_after_gc_mb": heap,
        "rss_mb": [round(marks[b][0]) for b in range(batches)],
        "state_files": files,
        "state_bytes": size,
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def _spread(values: list[float], digits: int = 0) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def render(results: list[dict[str, Any]]) -> str:
    """Markdown per key count: medians over rounds with [min-max], ratios to HDFS per round."""
    parts: list[str] = []
    for keys in sorted({r["keys"] for r in results}):
        group = [r for r in results if r["keys"] == keys]
        setups = list(dict.fromkeys(r["setup"] for r in group))
        by_setup = {s: [r for r in group if r["setup"] == s] for s in setups}
        base = by_setup.get(BASELINE, [])
        rows = []
        for setup in setups:
            runs = by_setup[setup]
            batch_ratio = [r["batch_ms"] / b["batch_ms"] for r, b in zip(runs, base, strict=False) if b["batch_ms"]]
            cpu_ratio = [r["cpu_ms"] / b["cpu_ms"] for r, b in zip(runs, base, strict=False) if b["cpu_ms"]]
            last = runs[-1]
            threads = ", ".join(f"{g} {v}" for g, v in list(last["cpu_by_threads_ms"].items())[:4])
            rows.append(
                [
                    setup + (" (tidemark default)" if setup == TIDEMARK_DEFAULT else ""),
                    _spread([r["batch_ms"] for r in runs]),
                    _spread(batch_ratio, 2) + "x" if batch_ratio else "-",
                    _spread([r["cpu_ms"] for r in runs]) + f" ({threads})",
                    _spread(cpu_ratio, 2) + "x" if cpu_ratio else "-",
                    _spread([r["updates_ms"] for r in runs]) + " / " + _spread([r["commit_ms"] for r in runs]),
                    f"{last['memory_bytes'] / 1024**2:.0f}",
                    _spread([r["heap_after_gc_mb"] for r in runs]),
                    f"{max(max(r['rss_mb']) for r in runs):.0f}",
                    f"{last['state_bytes'] / 1024**2:.1f} MB / {last['state_files']}",
                ]
            )
        header = [
            "setup",
            "batch ms",
            "batch / hdfs",
            "JVM CPU ms per batch (last run by threads)",
            "CPU / hdfs",
            "updates / commit ms",
            "state memory MB",
            "heap after GC MB",
            "peak RSS MB",
            "state on disk / files",
        ]
        rounds = max(len(v) for v in by_setup.values())
        parts.append(
            f"### {keys:,} keys, {group[0]['batches']} batches, {rounds} round(s)\n\n" + markdown_table(header, rows)
        )
    return "\n\n".join(parts)


def main() -> None:
    """Parse arguments, run every setup for every key count in interleaved rounds, print markdown, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="10000,100000,1000000", help="comma-separated key counts")
    parser.add_argument("--batches", type=int, default=6, help="batches per run (batch 0 creates the keys)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per key count")
    parser.add_argument("--setups", default=f"{BASELINE},rocksdb+changelog,{TIDEMARK_DEFAULT}", help="setups")
    parser.add_argument("--driver-memory", default="3g", help="the JVM heap (fixed when it starts)")
    parser.add_argument("--partitions", type=int, default=2, help="shuffle partitions = state store instances")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    parser.add_argument("--log", type=Path, default=None, help="also write every batch as a tidemark progress log")
    args = parser.parse_args()

    setups = args.setups.split(",")
    if sum(1 for s in setups if s != BASELINE) > 1 and any("@" in s for s in setups):
        parser.error("a NAME@MB setup sets RocksDB's one bound for the whole JVM: run it alone or with hdfs")
    # Sized before the JVM starts, as `tidemark run` does: the machine's memory beside this heap.
    _SIZED[TIDEMARK_DEFAULT] = tidemark_state_conf(args.driver_memory, args.partitions)
    print("tidemark's state store settings:", json.dumps(_SIZED[TIDEMARK_DEFAULT]), file=sys.stderr, flush=True)
    print("sized at start:", json.dumps(START), file=sys.stderr, flush=True)
    spark = session(shuffle_partitions=args.partitions, driver_memory=args.driver_memory)
    jvm = Jvm(spark)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-state-"))
    results: list[dict[str, Any]] = []
    try:
        # Warm the JVM (JIT, class loading) with every setup so the first measured setup is not penalised.
        for setup in setups:
            measure(spark, jvm, setup, 1000, 3, work / "warmup", args.timeout)
        for keys in [int(k) for k in args.keys.split(",")]:
            for round_number in range(args.rounds):
                for setup in setups if round_number % 2 == 0 else list(reversed(setups)):
                    result = measure(spark, jvm, setup, keys, args.batches, work, args.timeout, args.log)
                    result["round"] = round_number
                    print(json.dumps(result), file=sys.stderr, flush=True)
                    results.append(result)
    finally:
        # Stop first: state store maintenance threads may still write into the folder.
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps({"start": START, "runs": results}, indent=2), encoding="utf-8")
    print(render(results))


if __name__ == "__main__":
    main()
