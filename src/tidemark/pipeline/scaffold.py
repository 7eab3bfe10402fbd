"""`tidemark init`: a ready example config and data, so a new user has a working pipeline at once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidemark.config import load_config
from tidemark.errors import UsageError
from tidemark.pipeline.generate import GenerateResult, generate_events

EXAMPLE_CONFIG = """\
# tidemark pipeline: per-user 15-minute windows over a landing folder of JSON-lines events.
# Relative paths are relative to this file.

[pipeline]
name = "{name}"

[spark]
master = "local[2]"          # or "spark://host:7077", "yarn", "k8s://..."
shuffle_partitions = 4       # fixed for the life of the checkpoint

[source]
format = "json"              # json | csv | parquet | rate | kafka
path = "landing"
schema = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"
max_files_per_trigger = 2

[event_time]
column = "ts"
watermark = "10 minutes"     # how late an event may arrive and still count

[aggregation]
kind = "window"
key = ["user"]
window = "15 minutes"
# slide = "5 minutes"        # uncomment for sliding windows
extra = [{{ function = "sum", column = "value", name = "value_sum" }}]

[sink]
format = "parquet"
path = "output"              # partitioned by windowStart

[checkpoint]
location = "checkpoint"
state_store = "rocksdb"      # rocksdb | hdfs
changelog = true
min_batches_to_retain = 20

[trigger]
mode = "processing-time"     # processing-time | available-now
interval = "10 seconds"
max_duration = "4h"          # graceful stop: the batch in flight commits, then exit 0
# target_batch_duration = "2 minutes"   # catch up on a backlog in bigger batches (docs/catchup.md)

[quarantine]
path = "quarantine"          # malformed records, one JSON-lines file per batch
"""


@dataclass(frozen=True)
class InitResult:
    """What `init` wrote."""

    config_path: Path
    data: GenerateResult


def init_project(directory: str | Path, name: str = "example", events: int = 20_000, seed: int = 7) -> InitResult:
    """Write DIR/tidemark.toml and DIR/landing with generated events; refuse to overwrite a config."""
    root = Path(directory)
    config_path = root / "tidemark.toml"
    if config_path.exists():
        msg = f"{config_path} already exists: choose an empty folder"
        raise UsageError(msg)
    root.mkdir(parents=True, exist_ok=True)
    config_path.write_text(EXAMPLE_CONFIG.format(name=name), encoding="utf-8")
    load_config(config_path)  # the example must always be valid
    data = generate_events(
        root / "landing", events=events, keys=50, files=8, seed=seed, late_fraction=0.01, malformed_fraction=0.01
    )
    return InitResult(config_path, data)
