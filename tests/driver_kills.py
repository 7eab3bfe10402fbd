"""Driver kills at chosen moments of a table sink's batch (Delta, Iceberg): the harness of the table chaos tests.

A moment (a phase) is one of: while the JVM starts, right after a batch is planned (`offsets/<n>`), once a batch's
data files are in the table's folder before the table's commit, right after the table's commit and before Spark's
`commits/<n>`, right after that commit. Each kill takes the whole driver (Python and its JVM: its process group,
tests/integration/test_chaos.py's `run_until_killed`). Where a kill landed is read off the checkpoint and the table
once the driver is dead; a kill that missed its moment (the batch went past it, the run ended) is tried again with
more input landed, and the caller asserts every moment was reached.

What differs by table format is a `TableProbe`: how many commits the table has, how many of its data files no commit
added, and the newest batch whose commit is in it. The kill between the table's commit and Spark's comes from inside
the driver (KILL_AFTER_COMMIT), right after a random batch's `foreachBatch` function returned: that moment lasts
milliseconds, and a watcher outside hit it in about one try of five.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from tests.integration.test_chaos import _batches, _parquet, run_until_killed

START, PLANNED, FILES_WRITTEN, TABLE_COMMITTED, COMMITTED = (
    "start",
    "planned",
    "files-written",
    "table-committed",
    "committed",
)
PHASES = (START, PLANNED, FILES_WRITTEN, TABLE_COMMITTED, COMMITTED)


class TableProbe(Protocol):
    """What the kills read off a table, in its own format."""

    @property
    def folder(self) -> Path:
        """The table's folder (its data files are the `*.parquet` below it)."""
        ...

    def commits(self) -> int:
        """The table's commits so far (Delta's log entries, Iceberg's metadata versions)."""
        ...

    def orphans(self) -> int:
        """Data files in the table's folder that no commit added: a batch's files written before its commit."""
        ...

    def newest_batch(self, checkpoint: Path) -> int | None:
        """The newest batch of this checkpoint whose commit is in the table, None when none is."""
        ...


@dataclass(frozen=True)
class Seen:
    """The checkpoint and the table at one moment."""

    offsets: frozenset[int]
    commits: frozenset[int]
    table_commits: int
    files: int
    orphans: int
    batch_in_table: int | None  # the newest batch whose table commit is in the table

    @classmethod
    def now(cls, root: Path, table: TableProbe) -> Seen:
        checkpoint = root / "checkpoint"
        return cls(
            frozenset(_batches(checkpoint / "offsets")),
            frozenset(_batches(checkpoint / "commits")),
            table.commits(),
            _parquet(table.folder),
            table.orphans(),
            table.newest_batch(checkpoint),
        )


def landed(phase: str, before: Seen, after: Seen, code: int) -> bool:
    """True when a kill (exit -9: the driver still ran) landed in its phase, read off what the dead driver left."""
    if code != -9:
        return False
    planned = bool(after.offsets - before.offsets)
    if phase == START:
        return not planned
    if phase == PLANNED:
        return planned
    if phase == FILES_WRITTEN:
        return after.orphans > before.orphans
    if phase == TABLE_COMMITTED:
        newest = max(after.commits, default=-1)
        fresh = after.table_commits > before.table_commits  # this run's commit, not one left by an earlier kill
        return fresh and after.batch_in_table is not None and after.batch_in_table > newest
    return bool(after.commits - before.commits)


def wait_for(phase: str, root: Path, table: TableProbe, rng: random.Random, driver: subprocess.Popen[bytes]) -> None:
    """Return at a moment of the chosen phase (or when the driver ends, or after 90 s)."""
    checkpoint = root / "checkpoint"
    deadline = time.monotonic() + 90
    if phase == START:
        time.sleep(rng.uniform(0.5, 8.0))
        return
    if phase == TABLE_COMMITTED:  # the driver kills itself right after a table commit (KILL_AFTER_COMMIT)
        driver.wait(timeout=120)
        return
    offsets, commits = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
    files, logged = _parquet(table.folder), table.commits()
    while driver.poll() is None and time.monotonic() < deadline:
        new_commit = bool(_batches(checkpoint / "commits") - commits)
        if phase == PLANNED and _batches(checkpoint / "offsets") - offsets:
            break
        if phase == FILES_WRITTEN:
            written = _parquet(table.folder)
            if written > files and table.commits() == logged:
                break
            if written == files:  # a batch that emitted no row commits without a file: wait for the next one
                logged = table.commits()
        if phase == COMMITTED and new_commit:
            break
        time.sleep(0.002 if phase == FILES_WRITTEN else 0.005)
    # Files written before their commit: the kill follows at once; the other moments wait a little.
    time.sleep(0.0 if phase == FILES_WRITTEN else rng.uniform(0.0, 0.05 if phase == COMMITTED else 0.2))


# The driver, killed (with its JVM: the process group) right after the table commit of its n-th batch returned,
# before Spark writes that batch's commits/<n>: a moment of milliseconds no outside watcher hits reliably.
KILL_AFTER_COMMIT = """
import os, signal, sys
from pyspark.sql.streaming.readwriter import DataStreamWriter
real = DataStreamWriter.foreachBatch
calls = [0]
def foreach_batch(self, func):
    def wrapped(frame, batch):
        func(frame, batch)
        calls[0] += 1
        if calls[0] == {nth}:
            os.killpg(os.getpgrp(), signal.SIGKILL)
    return real(self, wrapped)
DataStreamWriter.foreachBatch = foreach_batch
from tidemark.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


class Landing:
    """A landing folder fed from a reserve of files, in order: `files` are those landed so far (the oracle's input)."""

    def __init__(self, reserve: Sequence[Path], folder: Path) -> None:
        self.pending = list(reserve)
        self.files: list[Path] = []
        self.folder = folder
        folder.mkdir(exist_ok=True)

    def land(self, count: int) -> None:
        """The next `count` files of the reserve copied in (fewer once it runs out), a little apart in time."""
        for file in [self.pending.pop(0) for _ in range(min(count, len(self.pending)))]:
            shutil.copy2(file, self.folder / file.name)
            self.files.append(file)
            time.sleep(0.02)


def kill_plan(rng: random.Random, kills: int) -> list[str]:
    """Every phase at least once, the rest at random, shuffled."""
    plan = [*PHASES, *(rng.choice(PHASES) for _ in range(kills - len(PHASES)))]
    rng.shuffle(plan)
    return plan


def kill_in_each_phase(
    plan: Sequence[str],
    *,
    config: Path,
    root: Path,
    table: TableProbe,
    rng: random.Random,
    land: Callable[[int], None],
    tries: int,
    after_kill: Callable[[str], None] | None = None,
) -> tuple[Counter[str], Counter[str]]:
    """`tidemark run CONFIG --available-now` killed once in each phase of plan (up to `tries` runs each, 2 more
    input files landed after a miss); after_kill is called with the phase of each kill that landed. The kills that
    landed per phase, and the runs each phase took."""
    reached: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    for phase in plan:
        for _ in range(tries):
            runs[phase] += 1
            before = Seen.now(root, table)
            entry = ["-c", KILL_AFTER_COMMIT.format(nth=rng.randint(1, 2))] if phase == TABLE_COMMITTED else None
            started = time.monotonic()
            code = run_until_killed(
                ["run", str(config), "--available-now"], partial(wait_for, phase, root, table, rng), entry=entry
            )
            hit = landed(phase, before, Seen.now(root, table), code)
            print(f"kill {phase}: {'landed' if hit else 'missed'} after {time.monotonic() - started:.1f} s")
            if hit:
                reached[phase] += 1
                if after_kill is not None:
                    after_kill(phase)
                break
            land(2)  # batches to reach the moment in, the next try
    return reached, runs
