"""Benchmark: `state repartition` of 1M state keys (4 -> 16 partitions) vs rebuilding the state by replaying the source.

Setup (once): `--keys` distinct keys in 4 Parquet files, one event per key, and a streaming aggregation
(count and sum per key, no watermark, so every key stays in state) run over them with 4 shuffle partitions on
RocksDB: its checkpoint holds `--keys` state rows.

Then two commands, each a fresh process (JVM start included), timed by an outside harness in alternation:
- `repartition`: copy the checkpoint, `repartition_checkpoint(copy, 16, apply=True)`: read every row with
  Spark's state store, place it, write 16 new stores, copy the logs, verify with Spark's statestore reader, swap.
- `replay`: the alternative without tidemark: a new checkpoint with 16 partitions, the same query over the
  same source from the start. One event per key is the cheapest possible replay; a real source holds many
  events per key and costs that many times more, while repartition costs the same.
Each command prints its own phases as one JSON line.

Run by hand:
  .venv/bin/python benchmarks/state_repartition.py build --dir /tmp/trb --keys 1000000
  .venv/bin/python benchmarks/state_repartition.py repartition --dir /tmp/trb
  .venv/bin/python benchmarks/state_repartition.py replay --dir /tmp/trb
(BENCHMARKS.md: 5 rounds of the last two, alternating which goes first, each a fresh process; each prints its
phases, its wall time and the peak resident set of its largest process, the JVM, sampled from /proc every 0.2 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

FILES = 4
OLD_PARTITIONS, NEW_PARTITIONS = 4, 16
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _session(partitions: int) -> Any:
    from tidemark.session import build_session

    return build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
    )


def _run_query(spark: Any, source: Path, checkpoint: Path) -> float:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    frame = spark.readStream.schema("k STRING, v BIGINT").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (
        frame.groupBy("k")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.perf_counter() - started


def build(folder: Path, keys: int) -> None:
    """Write the source and run the query once with 4 partitions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(folder, ignore_errors=True)
    source = folder / "source"
    source.mkdir(parents=True)
    per_file = keys // FILES
    for index in range(FILES):
        start = index * per_file
        ids = range(start, start + per_file)
        table = pa.table({"k": [f"key-{i:08d}" for i in ids], "v": list(ids)})
        pq.write_table(table, source / f"part-{index}.parquet")
    seconds = _run_query(_session(OLD_PARTITIONS), source, folder / "checkpoint")
    print(json.dumps({"built": keys, "seconds": round(seconds, 1)}))


def repartition(folder: Path) -> None:
    """Repartition a fresh copy of the built checkpoint to 16 partitions (apply, verified)."""
    import tidemark.evolve.repartition as module

    work = folder / "work-repartition"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    copy = work / "checkpoint"
    shutil.copytree(folder / "checkpoint", copy)
    phases: dict[str, float] = {}
    compare = module.compare_state

    def timed_compare(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return compare(*args)
        finally:
            phases["verify_s"] = time.perf_counter() - began

    module.compare_state = timed_compare  # type: ignore[assignment]
    started = time.perf_counter()
    report = module.repartition_checkpoint(str(copy), NEW_PARTITIONS, apply=True)
    phases["total_s"] = time.perf_counter() - started
    rows = sum(sum(s.rows_by_old_partition) for s in report.stores)
    print(json.dumps({"rows": rows, **{k: round(v, 1) for k, v in phases.items()}}))
    shutil.rmtree(work, ignore_errors=True)


def replay(folder: Path) -> None:
    """Rebuild the same state with 16 partitions by running the query over the whole source again."""
    checkpoint = folder / "work-replay" / "checkpoint"
    shutil.rmtree(checkpoint.parent, ignore_errors=True)
    seconds = _run_query(_session(NEW_PARTITIONS), folder / "source", checkpoint)
    print(json.dumps({"total_s": round(seconds, 1)}))
    shutil.rmtree(checkpoint.parent, ignore_errors=True)


class PeakMemory:
    """Samples the resident set of this process and its children (the JVM) every 0.2 s, from their /proc entries."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.2):
            stack = [os.getpid()]
            while stack:
                pid = stack.pop()
                try:
                    with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
                        self.peak = max(self.peak, int(handle.read().split()[1]) * page)
                    for task in os.listdir(f"/proc/{pid}/task"):
                        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                            stack.extend(int(child) for child in handle.read().split())
                except OSError:
                    continue  # ended meanwhile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "repartition", "replay"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()
    started = time.perf_counter()
    with PeakMemory() as memory:
        if args.command == "build":
            build(args.dir, args.keys)
        elif args.command == "repartition":
            repartition(args.dir)
        else:
            replay(args.dir)
    # Whole process: JVM start, the work, and the largest single process's peak resident set (the JVM's).
    wall = time.perf_counter() - started
    print(json.dumps({"command": args.command, "wall_s": round(wall, 1), "peak_mib": round(memory.peak / 2**20)}))


if __name__ == "__main__":
    main()
