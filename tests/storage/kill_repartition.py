"""`tidemark ARGS` (a `state repartition --apply`) in this process, SIGKILLed at a seeded random point inside one
phase of the repartition (tests/storage/test_repartition_kills.py).

    python -m tests.storage.kill_repartition PHASE SEED RECORD -- ARGS...

Each phase's own function is wrapped here, as the first kill test wrapped the swap's object copy, so tidemark
carries no kill switch. The point is drawn from random.Random(SEED) among the phase's own steps where it has
countable ones (files fetched, files staged, objects moved), else (the JVM's rewrite and Spark's verification, one
call each) as a delay into the call, at the latest its end. Just before dying, one JSON line goes to RECORD: the
phase and the point, so the test counts a kill only where it really happened.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

PHASES = ("fetch", "rewrite", "verify", "upload", "swap")
STARTED = time.monotonic()
# The longest delay drawn into the one-call phases: about their length on the small checkpoints of the tests.
CALL_SECONDS = {"rewrite": 2.0, "verify": 4.0}


class _Killer:
    def __init__(self, phase: str, rng: random.Random, record: Path) -> None:
        self.phase = phase
        self.rng = rng
        self.record = record
        self.lock = threading.Lock()
        self.entered = STARTED  # when the phase started, once it has

    def enter(self) -> None:
        self.entered = time.monotonic()

    def die(self, point: str) -> NoReturn:
        with self.record.open("w") as out:
            now = time.monotonic()
            at = {"seconds": round(now - STARTED, 2), "phase_seconds": round(now - self.entered, 2)}
            out.write(json.dumps({"phase": self.phase, "point": point, "pid": os.getpid(), "time": time.time(), **at}))
            out.flush()
            os.fsync(out.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")  # pragma: no cover

    def at_call(self, total: int, what: str) -> Callable[[], None]:
        """A tick for each of `total` steps: the process dies as step k (drawn in 1..total) starts."""
        chosen = self.rng.randint(1, max(total, 1))
        self.enter()
        count = [0]

        def tick() -> None:
            with self.lock:
                count[0] += 1
                if count[0] == chosen:
                    self.die(f"as {what} {chosen} of {total} started")

        return tick

    def during(self, call: Callable[[], Any], what: str) -> NoReturn:
        """Run call; die after a drawn delay into it, or at its end if it ends first."""
        delay = self.rng.uniform(0.0, CALL_SECONDS[self.phase])
        self.enter()
        started = time.monotonic()
        timer = threading.Timer(delay, self.die, (f"{delay:.2f} s into {what}",))
        timer.daemon = True
        timer.start()
        call()
        self.die(f"at the end of {what} ({time.monotonic() - started:.2f} s, before the {delay:.2f} s drawn)")


def arm(phase: str, killer: _Killer) -> None:
    """Wrap the function that does the phase's work."""
    from tidemark.evolve import repartition
    from tidemark.formats import state_files
    from tidemark.formats.layout import LOCK_FILE
    from tidemark.storage import journal, open_storage

    if phase == "fetch":
        fetch_state, fetch_one = state_files.fetch_state, state_files._fetch_one

        def fetching(checkpoint: Any, versions: set[int], target: Path | None = None) -> Any:
            tick = killer.at_call(len(state_files.files_for_versions(checkpoint, versions).files), "fetching file")

            def one(*args: Any) -> Any:
                tick()
                return fetch_one(*args)

            state_files._fetch_one = one
            return fetch_state(checkpoint, versions, target)

        state_files.fetch_state = fetching
    elif phase == "rewrite":
        run_move = repartition.run_move

        def moving(spark: Any, spec: Any) -> Any:
            killer.during(lambda: run_move(spark, spec), "the state writer's job")

        repartition.run_move = moving
    elif phase == "verify":
        compare_state = repartition.compare_state

        def comparing(*args: Any, **kwargs: Any) -> Any:
            killer.during(lambda: compare_state(*args, **kwargs), "the verification with Spark's readers")

        repartition.compare_state = comparing
    elif phase == "upload":
        clone_whole = repartition.clone_whole

        def uploading(source: Any, target: Any) -> Any:
            total = sum(1 for e in source.store.list_files("") if e.rel != LOCK_FILE)
            tick = killer.at_call(total, "staging file")
            write = target.write_atomic

            def write_atomic(rel: str, data: bytes, **kwargs: Any) -> bool:
                tick()
                return bool(write(rel, data, **kwargs))

            target.write_atomic = write_atomic
            return clone_whole(source, target)

        repartition.clone_whole = uploading
    elif phase == "swap":
        swap_in, copy = repartition.swap_in, journal._copy

        def swapping(checkpoint: Any, archive: Any, staging: Any) -> Any:
            total = sum(1 for _ in open_storage(checkpoint).list_files("")) + sum(
                1 for _ in open_storage(staging).list_files("")
            )
            tick = killer.at_call(total, "moving object")

            def copying(*args: Any) -> None:
                tick()
                copy(*args)

            journal._copy = copying
            return swap_in(checkpoint, archive, staging)

        repartition.swap_in = swapping
    else:
        raise SystemExit(f"unknown phase {phase!r}: one of {', '.join(PHASES)}")


def main(argv: list[str]) -> int:
    """Arm the kill, run the command; exit with its code if the kill point was never reached."""
    phase, seed, record, dashes, *args = argv
    assert dashes == "--", argv
    arm(phase, _Killer(phase, random.Random(seed), Path(record)))
    from tidemark.cli.main import main as tidemark

    return tidemark(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
