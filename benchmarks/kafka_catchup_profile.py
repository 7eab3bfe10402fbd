"""Where a Kafka catch-up run's time goes: a cProfile of `run_pipeline` on the driver, beside Spark's batch times.

Run by hand: `.venv/bin/python benchmarks/kafka_catchup_profile.py [--records 1000000] [--runs 3]` (needs
`make kafka`). The topic is preloaded as benchmarks/kafka_pipeline.py does; each run is the `tidemark-catchup` job
of that benchmark (one session, fresh checkpoint); the first run warms the JVM and is not profiled. Driver-side
time outside Spark's batches (checks, planning, the quarantine's re-read, the query's start and stop) shows as
tidemark functions with a large cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from tests.helpers import write_config  # noqa: E402
from tests.kafka_broker import start_broker  # noqa: E402

from kafka_pipeline import TOPIC, kafka_session, preload  # noqa: E402
from tidemark.config import load_config  # noqa: E402
from tidemark.pipeline.run import run_pipeline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steady", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=30, help="tidemark functions shown, by cumulative time")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tidemark-kafka-profile-"))
    broker = start_broker(work / "broker")
    try:
        preload(broker, args.records)
        spark = kafka_session()
        for run in range(args.runs):
            out = work / f"run{run}"
            out.mkdir()
            source = {
                "format": "kafka",
                "path": None,
                "max_files_per_trigger": None,
                "bootstrap_servers": broker.bootstrap,
                "topic": TOPIC,
                "max_offsets_per_trigger": args.steady,
            }
            trigger = {"target_batch_duration": "2 minutes"}
            config = load_config(write_config(out, spark={"shuffle_partitions": 4}, source=source, trigger=trigger))
            batch_ms: list[int] = []

            def progress(p: dict[str, Any], into: list[int] = batch_ms) -> None:
                into.append(int(p["batchDuration"]))

            profile = cProfile.Profile()
            started = time.perf_counter()
            profile.enable()
            run_pipeline(config, available_now=True, spark=spark, on_progress=progress)
            profile.disable()
            wall = time.perf_counter() - started
            print(f"run {run}: {wall:.1f} s end to end, Spark's batches {batch_ms} ms ({sum(batch_ms) / 1000:.1f} s)")
            if run > 0:
                pstats.Stats(profile).sort_stats("cumulative").print_stats("tidemark", args.top)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
