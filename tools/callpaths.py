"""Count the call paths that go down into a lower package and back up through a higher one (issue: formats/).

Runs, in this process, the demo pipeline on a small generated landing folder (`tidemark init` + `run
--available-now`) and then the dry run of `recover --to-batch 1`, with a profiler that records every call
between two tidemark functions. A call is "upward" when the callee's package sits above the caller's in the
package layering (pyproject's import-linter contract; in code that predates formats/, checkpoint/ and
monitor/ are taken at their own places in that order). Each distinct (caller, callee) function pair that
goes upward is one down-and-up: the caller was reached going down, and it climbs back. Also counted: the
distinct functions outside formats/ that read, write, list or delete files of a checkpoint, sink log or
progress log through the storage layer themselves.

    .venv/bin/python tools/callpaths.py            # this checkout
    PYTHONPATH=/path/to/other/src .venv/bin/python tools/callpaths.py   # another checkout, same order
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ORDER = [
    "cli",
    "recovery",
    "evolve",
    "pipeline",
    "monitor",
    "plan",
    "state",
    "checkpoint",
    "stateful",
    "formats",
    "spark",
    "cluster",
    "storage",
    "session",
    "config",
    "durations",
    "sizes",
    "schema",
    "findings",
    "cache",
    "errors",
]
# Siblings on one layer (recovery | evolve, state | checkpoint | stateful, spark | cluster) share a rank.
RANK = {
    name: rank
    for rank, names in enumerate(
        [
            ["cli"],
            ["recovery", "evolve"],
            ["pipeline"],
            ["monitor"],
            ["plan"],
            ["state", "checkpoint", "stateful"],
            ["formats"],
            ["spark", "cluster"],
            ["storage"],
            ["session"],
            ["config"],
            ["durations", "sizes", "schema", "findings", "cache"],
            ["errors"],
        ]
    )
    for name in names
}
STORAGE_IO = {"read_bytes", "write_atomic", "delete", "list_dir", "list_files", "walk", "stat", "open_read", "rename"}
FORMAT_NAMES = ("offsets", "commits", "sources", "state", "metadata", "_spark_metadata", "_tidemark")


def touches_format(frame: FrameType) -> bool:
    """True when a storage call names a file of a checkpoint, a sink log or a progress log."""
    rel = str(frame.f_locals.get("rel", frame.f_locals.get("source", "")) or "")
    store = frame.f_locals.get("self")
    root = str(getattr(getattr(store, "location", None), "uri", ""))
    return (
        rel.split("/")[0] in FORMAT_NAMES
        or root.rstrip("/").endswith(("/checkpoint", "/_spark_metadata"))
        or "checkpoint-monitor" in root
    )


# Code from before formats/ existed: the modules that moved into formats/ count as formats/ there, so "outside
# formats/" means the same code in both counts.
MOVED_INTO_FORMATS = {
    "tidemark.doctor.layout",
    "tidemark.doctor.handle",
    "tidemark.doctor.scan",
    "tidemark.doctor.sink",
    "tidemark.doctor.schema",
    "tidemark.doctor.fetch",
    "tidemark.doctor.lock",
    "tidemark.doctor.ledger",
    "tidemark.doctor.clone",
    "tidemark.doctor.rewrite",
    "tidemark.monitor.progress",
    "tidemark.monitor.log",
    "tidemark.monitor.writer",
}


def package(frame: FrameType) -> str | None:
    name = str(frame.f_globals.get("__name__", ""))
    parts = name.split(".")
    if parts[0] != "tidemark" or len(parts) < 2:
        return None
    return "formats" if name in MOVED_INTO_FORMATS else parts[1]


def where(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"


class Recorder:
    """sys.setprofile hook: upward edges and storage I/O made outside formats/."""

    def __init__(self) -> None:
        self.upward: set[tuple[str, str]] = set()
        self.io_outside: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = package(frame)
        caller_frame = frame.f_back
        if callee is None or caller_frame is None:
            return
        caller = package(caller_frame)
        if caller is None:
            return
        if (
            callee == "storage"
            and frame.f_code.co_name in STORAGE_IO
            and caller not in ("storage", "formats")
            and touches_format(frame)
        ):
            self.io_outside.add(where(caller_frame))
        if caller != callee and RANK.get(callee, 99) < RANK.get(caller, 99):
            self.upward.add((where(caller_frame), where(frame)))


def profiled(action: Callable[[], object]) -> Recorder:
    recorder = Recorder()
    threading.setprofile(recorder)  # listener callbacks arrive on py4j's threads
    sys.setprofile(recorder)
    try:
        action()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return recorder


def main() -> None:
    from tidemark.cli.main import main as cli

    work = Path(tempfile.mkdtemp(prefix="tidemark-callpaths-"))
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(["init", str(work / "demo")]) == 0
    config = str(work / "demo" / "tidemark.toml")

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli(["run", config, "--available-now"]) == 0

    def rollback() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli(["recover", config, "--to-batch", "1"]) == 0

    for name, action in (("run", run), ("recover --to-batch", rollback)):
        found = profiled(action)
        print(
            f"{name}: {len(found.upward)} upward call edge(s), {len(found.io_outside)} format I/O site(s) outside formats/"
        )
        for caller, callee in sorted(found.upward):
            print(f"  up   {caller} -> {callee}")
        for site in sorted(found.io_outside):
            print(f"  io   {site}")


if __name__ == "__main__":
    main()
