"""Rendering helpers shared by the CLI commands: rich consoles and JSON of typed results."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

# Results go to stdout; human progress and errors go to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def to_jsonable(value: Any) -> Any:
    """Turn dataclasses, enums, paths, datetimes into plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Path):
        return str(value)
    return value


def print_json(value: Any) -> None:
    """Write a result as indented JSON on stdout."""
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
