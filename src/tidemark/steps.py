"""What a long command is doing right now, for the CLI's progress display; a no-op unless the CLI shows one.

Library code says `with step("listing files") as advance: ... advance(n)`; the CLI installs a display (rich, on
stderr) only when stderr is a terminal and the output is not --json, so scripts and logs get no progress lines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

Advance = Callable[[int], None]


class Display(Protocol):
    """Where steps are shown."""

    def start(self, description: str, total: int | None) -> object:
        """Show a new step; the returned handle is passed back to advance and end."""
        ...

    def advance(self, handle: object, amount: int) -> None:
        """Count amount more of the step's units (files, batches, stores)."""
        ...

    def end(self, handle: object) -> None:
        """The step is over."""
        ...


_display: dict[str, Display | None] = {"current": None}
_lock = threading.Lock()


def show_with(display: Display | None) -> None:
    """Send steps to display (None: show nothing)."""
    with _lock:
        _display["current"] = display


def _ignore(amount: int) -> None:
    del amount


@contextmanager
def step(description: str, total: int | None = None) -> Iterator[Advance]:
    """A step of work with an optional total; yields the function that counts progress."""
    display = _display["current"]
    if display is None:
        yield _ignore
        return
    handle = display.start(description, total)

    def advance(amount: int = 1) -> None:
        display.advance(handle, amount)

    try:
        yield advance
    finally:
        display.end(handle)
