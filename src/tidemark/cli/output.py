"""Rendering helpers shared by the CLI commands: rich consoles and JSON of typed results."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

# Wide enough for any path or table row: when not a terminal (cron, CI logs, a pipe) nothing is cut at 80 columns.
UNWRAPPED_WIDTH = 10_000


def _console(stderr: bool) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, soft_wrap=True, width=UNWRAPPED_WIDTH)
    return console


# Results go to stdout; human progress and errors go to stderr.
out = _console(stderr=False)
err = _console(stderr=True)


class RichSteps:
    """tidemark.steps shown as rich progress lines on stderr (spinner, what, count, elapsed), gone when done."""

    def __init__(self, console: Console) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._lock = threading.Lock()
        self._open = 0

    def start(self, description: str, total: int | None) -> object:
        """Show a step."""
        with self._lock:
            if self._open == 0:
                self._progress.start()
            self._open += 1
            return self._progress.add_task(description, total=total, count=self._count(0, total))

    def advance(self, handle: object, amount: int) -> None:
        """Count progress of a step."""
        from rich.progress import TaskID

        task = TaskID(int(handle))  # type: ignore[call-overload]
        with self._lock:
            current = next((t for t in self._progress.tasks if t.id == task), None)
            if current is None:
                return
            done = int(current.completed) + amount
            self._progress.update(task, completed=done, count=self._count(done, current.total))

    def end(self, handle: object) -> None:
        """Remove a finished step (and the display with the last one)."""
        from rich.progress import TaskID

        with self._lock:
            self._progress.remove_task(TaskID(int(handle)))  # type: ignore[call-overload]
            self._open -= 1
            if self._open == 0:
                self._progress.stop()

    @staticmethod
    def _count(done: int, total: float | None) -> str:
        if total:
            return f"{done:,} of {int(total):,}"
        return f"{done:,}" if done else ""


def show_steps(json_output: bool) -> None:
    """Show tidemark.steps on stderr when it is a terminal and the output is not JSON; else show nothing."""
    from tidemark.steps import show_with

    show_with(RichSteps(err) if err.is_terminal and not json_output else None)


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
    from tidemark.secrets import redact

    text = json.dumps(to_jsonable(value), indent=2, sort_keys=False)
    sys.stdout.write(redact(text) + "\n")
    sys.stdout.flush()


def program() -> str:
    """How to type tidemark in the hints it prints: `tidemark` where that name on PATH is this program, else the
    path it was started by (a fresh clone's `.venv/bin/tidemark`, relative to the current folder when inside it)."""
    import shutil

    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is None or started.name != "tidemark":
        return "tidemark"
    on_path = shutil.which("tidemark")
    if on_path is not None and Path(on_path).resolve() == started.resolve():
        return "tidemark"
    here = Path.cwd()
    return os.path.relpath(started.resolve(), here) if started.resolve().is_relative_to(here) else str(started)
