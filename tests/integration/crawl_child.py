"""Run a growing window pipeline with a tiny RocksDB cap in this process (its own JVM: the cap is one per JVM).

Usage: python crawl_child.py ROOT KEYS_PER_BATCH BATCHES CAP_MB. Every batch file holds all keys so far plus
KEYS_PER_BATCH new ones, all in one day-long window, so every key is updated every batch and the state grows.
Prints one JSON line: the run's progress log, its warnings and batches.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.pipeline.run import run_pipeline

# Long keys: more bytes a key fill the cap with fewer rows (less data, a shorter test).
PADDING = "k" * 48


def main() -> None:
    root, per, batches, cap = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    landing = root / "landing"
    landing.mkdir(parents=True)
    for batch in range(batches):
        keys = (batch + 1) * per
        frame = pd.DataFrame(
            {
                "user": [f"user-{i:07d}-{PADDING}" for i in range(keys)],
                "ts": ["2026-01-01T12:00:00Z"] * keys,
                "value": 1.0,
            }
        )
        path = landing / f"part-{batch:03d}.parquet"
        frame.to_parquet(path)
        stamp = 1_700_000_000 + batch  # one file per batch, in this order
        os.utime(path, (stamp, stamp))
    config = load_config(
        write_config(
            root,
            spark={"driver_memory": "1g", "shuffle_partitions": 2},
            source={"format": "parquet", "schema": "user STRING, ts STRING, value DOUBLE"},
            aggregation={"window": "1 day"},
            checkpoint={"bounded_memory_mb": cap},
        )
    )
    result = run_pipeline(config, available_now=True)
    print(json.dumps({"log": result.monitor_log, "warnings": list(result.warnings), "batches": result.batches}))


if __name__ == "__main__":
    main()
