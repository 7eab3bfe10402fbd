"""Test helpers: write pipeline configs and read the sink like a plain Parquet user would."""

from __future__ import annotations

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


def read_sink(path: Path) -> pd.DataFrame:
    """Read the sink with pyarrow (not Spark), as any Parquet reader would; sorted by key and window."""
    frame = pd.read_parquet(path)
    frame["windowStart"] = pd.to_datetime(frame["windowStart"].astype(str), utc=True)
    for column in ("windowEnd", "firstEventTime", "lastEventTime"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame.sort_values(["user", "windowStart"]).reset_index(drop=True)
