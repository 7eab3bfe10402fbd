"""Test helpers: write pipeline configs and read the sink like a plain Parquet user would."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd

BASE_CONFIG: dict[str, dict[str, Any]] = {
    "pipeline": {"name": "t"},
    "spark": {"master": "local[2]", "shuffle_partitions": 2},
    "source": {
        "format": "json",
        "path": "landing",
        "schema": "event_id BIGINT, user STRING, ts STRING, value DOUBLE",
        "max_files_per_trigger": 1,
    },
    "event_time": {"column": "ts", "watermark": "10 minutes"},
    "aggregation": {
        "kind": "window",
        "key": ["user"],
        "window": "15 minutes",
        "extra": [{"function": "sum", "column": "value", "name": "value_sum"}],
    },
    "sink": {"format": "parquet", "path": "output"},
    "checkpoint": {"location": "checkpoint"},
    "trigger": {"mode": "available-now"},
    "quarantine": {"path": "quarantine"},
}


# quarantined_at, as every quarantine writer puts it: UTC, milliseconds, Z (docs: README's quarantine).
QUARANTINE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _toml_key(key: str) -> str:
    """Dotted keys (Spark settings) quoted, or TOML would read them as nested tables; quoted keys as given."""
    return _toml_value(key) if "." in key and not key.startswith('"') else key


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def to_toml(config: dict[str, dict[str, Any]]) -> str:
    """Render a two-level config mapping as TOML."""
    lines: list[str] = []
    for table, keys in config.items():
        lines.append(f"[{table}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in keys.items())
        lines.append("")
    return "\n".join(lines)


def write_config(directory: Path, **overrides: dict[str, Any]) -> Path:
    """Write BASE_CONFIG with per-table overrides (a None value removes a key) to directory/tidemark.toml."""
    config = {table: dict(keys) for table, keys in BASE_CONFIG.items()}
    for table, keys in overrides.items():
        section = config.setdefault(table, {})
        for key, value in keys.items():
            if value is None:
                section.pop(key, None)
            else:
                section[key] = value
    path = directory / "tidemark.toml"
    path.write_text(to_toml(config), encoding="utf-8")
    return path


def kafka_source(bootstrap: str, topic: str | None, **extra: Any) -> dict[str, Any]:
    """A `[source]` table that reads `topic` from the broker at `bootstrap` (the file source's keys cleared)."""
    return {
        "format": "kafka",
        "path": None,
        "max_files_per_trigger": None,
        "bootstrap_servers": bootstrap,
        "topic": topic,
        **extra,
    }


def read_sink(path: Path) -> pd.DataFrame:
    """Read the sink with pyarrow (not Spark), as any Parquet reader would; sorted by key and window."""
    frame = pd.read_parquet(path)
    frame["windowStart"] = pd.to_datetime(frame["windowStart"].astype(str), utc=True)
    for column in ("windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame.sort_values(["user", "windowStart"]).reset_index(drop=True)


def unlink_log_entry(folder: Path, batch: int) -> None:
    """Remove one Spark log entry (offsets/, commits/, a sink's _spark_metadata/) and its checksum file."""
    (folder / str(batch)).unlink()
    (folder / f".{batch}.crc").unlink(missing_ok=True)


def stop_before_the_no_data_batch(checkpoint: Path, sink: Path, committed: bool) -> int:
    """Leave a finished run's checkpoint and sink as a query stopped after its last data batch leaves them: the
    closing no-data batch never ran (its offsets, commit, sink log entry and files removed), and with
    committed=False the last data batch's commit is gone too (killed after its sink's commit). Its id."""
    import json
    from urllib.parse import unquote, urlparse

    no_data = max(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))
    offsets = (checkpoint / "offsets" / str(no_data)).read_text().splitlines()
    previous = (checkpoint / "offsets" / str(no_data - 1)).read_text().splitlines()
    assert offsets[2:] == previous[2:], "the run's last batch is the no-data batch after its last data batch"
    sink_log = sink / "_spark_metadata"
    written = [json.loads(line)["path"] for line in (sink_log / str(no_data)).read_text().splitlines()[1:]]
    assert written, "the no-data batch wrote the windows the last data batch's watermark closed"
    unlink_log_entry(checkpoint / "offsets", no_data)
    unlink_log_entry(checkpoint / "commits", no_data)
    for path in written:
        Path(unquote(urlparse(path).path)).unlink()
    unlink_log_entry(sink_log, no_data)
    if not committed:
        unlink_log_entry(checkpoint / "commits", no_data - 1)
    return no_data


def progress_lines(monitor: Path, kind: str) -> list[dict[str, Any]]:
    """The lines of one type in every progress log of a run's monitor folder."""
    import json

    lines = [json.loads(line) for log in sorted(monitor.glob("*.jsonl")) for line in log.read_text().splitlines()]
    return [line for line in lines if line["type"] == kind]


def wait_gone(pid: int, timeout_s: float = 10.0, *, group: bool = False) -> bool:
    """True once no process has this pid (reaped or never there), or with `group`, once the process group it leads
    has no process left (a killed Python's JVM outlives it by seconds); False after timeout_s."""
    probe = os.killpg if group else os.kill
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            probe(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
