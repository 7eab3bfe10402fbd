"""Cost of quarantine on clean data: tidemark's run with and without its malformed-row machinery, one process.

Run by hand: `.venv/bin/python benchmarks/quarantine_cost.py [--events 400000] [--files 20] [--rounds 5]`.

A: `run_pipeline` as shipped (the observation counts malformed rows and keeps one sample in the stream's own
   scan; after each batch the run lists the commits and moves the quarantine marker).
B: the same run with the observation removed and the per-batch quarantine step a no-op (what the pipeline would
   cost with no quarantine at all).
The malformed-row filter itself stays in both (without it the results would differ). Rounds alternate ABBA on
one local[2] session over the same clean files; reported: per-round ratio B/A of throughput, median and spread.
"""

from __future__ import annotations

import argparse
import json
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


def _one(spark: Any, root: Path, landing: Path, label: str, with_quarantine: bool) -> float:
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
        began = time.perf_counter()
        result = run.run_pipeline(config, available_now=True, spark=spark)
        elapsed = time.perf_counter() - began
    finally:
        run.validate, run._write_quarantine = saved
    assert result.quarantined == 0
    return result.input_rows / elapsed


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
    for r in range(args.rounds):
        order = [True, False] if r % 2 == 0 else [False, True]
        for flag in order:
            rate = _one(spark, root, landing, f"r{r}-{int(flag)}", flag)
            rates[flag].append(rate)
            print(f"round {r} {'quarantine' if flag else 'none      '}: {rate:10.0f} events/s", flush=True)
    ratios = [a / b for a, b in zip(rates[True], rates[False], strict=True)]
    print(
        json.dumps(
            {
                "events": args.events,
                "files": args.files,
                "rounds": args.rounds,
                "events_per_s_median": {
                    "with_quarantine": round(statistics.median(rates[True])),
                    "without": round(statistics.median(rates[False])),
                },
                "throughput_ratio_per_round": [round(x, 4) for x in ratios],
                "throughput_ratio_median": round(statistics.median(ratios), 4),
                "min": round(min(ratios), 4),
                "max": round(max(ratios), 4),
            },
            indent=1,
        )
    )
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
