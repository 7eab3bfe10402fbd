"""Cost of quarantine on clean data: tidemark's run with and without its malformed-row machinery, one process.

Run by hand: `.venv/bin/python benchmarks/quarantine_cost.py [--events 400000] [--files 20] [--rounds 5]`.

A: `run_pipeline` as shipped (the observation counts malformed rows and keeps one sample in the stream's own
   scan; after each batch the run lists the commits and moves the quarantine marker).
B: the same run with the observation removed and the per-batch quarantine step a no-op (what the pipeline would
   cost with no quarantine at all).
The malformed-row filter itself stays in both (without it the results would differ). Rounds alternate ABBA on
one local[2] session over the same clean files; reported: per-round ratio B/A of throughput, median and spread,
and the same for the CPU time the run used (the JVM's and this Python process's, from /proc), which a busy
machine disturbs far less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import write_config  # noqa: E402

from tidemark.config import load_config  # noqa: E402
from tidemark.pipeline import quarantine, run  # noqa: E402
from tidemark.pipeline.generate import generate_events  # noqa: E402
from tidemark.session import build_session  # noqa: E402


def _no_observation(stream: Any, config: Any) -> Any:
    """validate() without the observation: the same filter and watermark."""
    from pyspark.sql import functions as F

    checks = quarantine._checks(stream, config)
    good = checks.frame.where(~checks.bad).select(
        *[F.col("_event_time").alias(c) if c == config.event_time.column else F.col(c) for c in stream.columns]
    )
    watermarked = good.withWatermark(config.event_time.column, quarantine._interval(config))
    return quarantine.ValidatedStream(watermarked, stream.columns)


def _cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU time of these processes so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def _one(spark: Any, root: Path, landing: Path, label: str, with_quarantine: bool) -> tuple[float, float]:
    """(events per second of wall time, events per CPU second) of one available-now run."""
    folder = root / label
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    config_path = write_config(
        folder,
        source={"path": str(landing), "max_files_per_trigger": 1},
        spark={"master": "local[2]", "shuffle_partitions": 2},
    )
    config = load_config(config_path)
    saved = run.validate, run._write_quarantine
    if not with_quarantine:
        run.validate = _no_observation  # type: ignore[assignment]
        run._write_quarantine = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        pids = (os.getpid(), int(spark.sparkContext._jvm.ProcessHandle.current().pid()))
        cpu_began, began = _cpu_seconds(pids), time.perf_counter()
        result = run.run_pipeline(config, available_now=True, spark=spark)
        elapsed = time.perf_counter() - began
        cpu = _cpu_seconds(pids) - cpu_began
    finally:
        run.validate, run._write_quarantine = saved
    assert result.quarantined == 0
    return result.input_rows / elapsed, result.input_rows / cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tm-bench-quarantine-"))
    landing = root / "landing"
    generate_events(landing, events=args.events, keys=1000, files=args.files, seed=3, malformed_fraction=0.0)
    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"})
    _one(spark, root, landing, "warmup", True)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu_rates: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for flag in order:
            rate, cpu_rate = _one(spark, root, landing, f"r{r}-{int(flag)}", flag)
            rates[flag].append(rate)
            cpu_rates[flag].append(cpu_rate)
            name = "quarantine" if flag else "none      "
            print(f"round {r} {name}: {rate:10.0f} events/s, {cpu_rate:10.0f} events/CPU s", flush=True)
    result: dict[str, Any] = {"events": args.events, "files": args.files, "rounds": args.rounds}
    for measure, values in (("wall", rates), ("cpu", cpu_rates)):
        ratios = [a / b for a, b in zip(values[True], values[False], strict=True)]
        result[measure] = {
            "events_per_s_median": {
                "with_quarantine": round(statistics.median(values[True])),
                "without": round(statistics.median(values[False])),
            },
            "throughput_ratio_per_round": [round(x, 4) for x in ratios],
            "throughput_ratio_median": round(statistics.median(ratios), 4),
            "min": round(min(ratios), 4),
            "max": round(max(ratios), 4),
        }
    print(json.dumps(result, indent=1))
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
