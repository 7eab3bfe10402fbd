"""Rendering helpers shared by the CLI commands: rich consoles and JSON of typed results."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

# Results go to stdout; human progress and errors go to stderr.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def download_progress() -> Callable[[str, int, int], None] | None:
    """A progress callback for downloads (file, bytes so far, total) drawn on stderr; None when not a terminal."""
    if not err.is_terminal:
        return None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err)
    tasks: dict[str, Any] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            if not bar.live.is_started:
                bar.start()
            tasks[name] = bar.add_task(name, total=total)
        bar.update(tasks[name], completed=done)
        if done >= total:
            bar.remove_task(tasks.pop(name))
            if not tasks:
                bar.stop()

    return update


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
