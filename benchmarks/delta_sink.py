"""tidemark's Delta sink against the same query hand-written with Spark's own Delta sink, interleaved, one JVM.

Run by hand: .venv/bin/python benchmarks/delta_sink.py [--files 40] [--rows 4000] [--rounds 6]

Both variants run the same windowed count (15-minute windows, 10-minute watermark, per user, sum of value) over the
same JSON files, one file per micro-batch, available-now, with the same session (Delta's jars from tidemark's lock,
its extension and catalog), the same shuffle partitions and the same writing stage (a coalesce to the task slots,
which tidemark's sink applies and the hand-written query is given too). They differ only in the sink: tidemark's
`foreachBatch` + idempotent Delta append (txnAppId/txnVersion, sinks/delta/sink.py) against
`writeStream.format("delta")`. Rounds run ABBA. Measured per run: wall seconds from the query's start to its end.
Reported: per-round ratio hand-written / tidemark (>= 0.95: tidemark at least 95 % of Spark's own throughput).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def write_inputs(folder: Path, files: int, rows: int) -> None:
    """files JSON-lines files of rows events each, five minutes of event time per file, 2,000 users."""
    folder.mkdir(parents=True)
    for f in range(files):
        lines = []
        for i in range(rows):
            minute = f * 5 + (i % 5)
            stamp = f"2026-01-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:{i % 60:02d}Z"
            lines.append(json.dumps({"event_id": f * rows + i, "user": f"u{i % 2000}", "ts": stamp, "value": i % 97}))
        path = folder / f"part-{f:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))


def config_for(root: Path, source: Path, label: str) -> Any:
    """The pipeline config of one run (its own checkpoint and table)."""
    from tidemark.config import parse_config

    return parse_config(
        {
            "pipeline": {"name": label},
            "spark": {"master": "local[2]", "shuffle_partitions": 2},
            "source": {"format": "json", "path": str(source), "schema": SCHEMA, "max_files_per_trigger": 1},
            "event_time": {"column": "ts", "watermark": "10 minutes"},
            "aggregation": {
                "kind": "window",
                "key": ["user"],
                "window": "15 minutes",
                "extra": [{"function": "sum", "column": "value", "name": "value_sum"}],
            },
            "sink": {"format": "delta", "path": str(root / f"table-{label}")},
            "checkpoint": {"location": str(root / f"ckpt-{label}"), "state_store": "hdfs"},
            "trigger": {"mode": "available-now"},
            "quarantine": {"path": str(root / f"q-{label}")},
        }
    )


def run_once(spark: Any, root: Path, source: Path, tidemark: bool, label: str) -> float:
    """One available-now run over every file; wall seconds from start to end of the query."""
    from tidemark.pipeline.query import build_query, task_slots
    from tidemark.pipeline.sinks import output_writers, writer_for

    config = config_for(root, source, label)
    writers = output_writers(config, task_slots(spark, config))
    output = build_query(spark, config, None, writers)
    began = time.perf_counter()
    if tidemark:
        query = writer_for(output, config, available_now=True).start()
    else:
        query = (
            output.writeStream.queryName(label)
            .outputMode("append")
            .format("delta")
            .partitionBy(*config.partition_by)
            .option("checkpointLocation", config.checkpoint.location)
            .trigger(availableNow=True)
            .start(config.sink.path)
        )
    query.awaitTermination()
    return time.perf_counter() - began


def rows_of(spark: Any, root: Path, label: str) -> int:
    """Rows the run's table holds (both variants must write the same)."""
    return int(spark.read.format("delta").load(str(root / f"table-{label}")).count())


def main() -> None:
    """Alternate tidemark's and Spark's Delta sink over the same files; print per-round ratios."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    from tidemark.needs import needs_of
    from tidemark.session import build_session
    from tidemark.spark.environment import start_settings

    root = Path(tempfile.mkdtemp(prefix="tm-bench-delta-"))
    source = root / "in"
    write_inputs(source, args.files, args.rows)
    needs = needs_of(config_for(root, source, "setup"))
    spark = build_session(needs.master, start_settings(needs), app_name="tidemark-bench-delta")
    # Warm-up: each variant once (JIT, Delta's first commit path), not counted.
    run_once(spark, root, source, True, "warm-tm")
    run_once(spark, root, source, False, "warm-spark")
    walls: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for flag in order:
            label = f"{'tm' if flag else 'spark'}{r}"
            wall = run_once(spark, root, source, flag, label)
            walls[flag].append(wall)
            print(f"round {r} {'tidemark' if flag else 'spark   '}: {wall:7.2f} s", flush=True)
    same = rows_of(spark, root, "tm0") == rows_of(spark, root, "spark0")
    ratios = [s / t for t, s in zip(walls[True], walls[False], strict=True)]
    result = {
        "rounds": args.rounds,
        "batches_per_run": args.files,
        "rows_per_batch": args.rows,
        "same_rows": same,
        "wall_s_median": {"tidemark": statistics.median(walls[True]), "spark": statistics.median(walls[False])},
        "throughput_ratio_per_round": [round(x, 4) for x in ratios],
        "throughput_ratio_median": round(statistics.median(ratios), 4),
        "throughput_ratio_min": round(min(ratios), 4),
    }
    print(json.dumps(result, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
