"""Issue 15.5: repeated crashes. The driver of a backlog run is SIGKILLed ten times in a row at random moments
(while the JVM starts and the run-start sweep runs, right after a batch is planned, once a batch's sink files
are on disk before its commit, right after a commit while the quarantine and ledger are written), restarted each
time, then left to finish: the output equals the pandas oracle with no (key, window) twice for a raw pyarrow
read, and the quarantine holds each malformed line exactly once. SIGKILL during `prune --apply` and
`recover --apply` moves is finished by a rerun with nothing lost.

The seed is printed; set TIDEMARK_CHAOS_SEED to replay a failure.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.integration.test_recovery import _assert_matches_oracle, _expected
from tests.oracles import count_malformed
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.context import PipelineContext
from tidemark.doctor.prune import prune_checkpoint
from tidemark.formats import Checkpoint
from tidemark.formats import read_quarantine_marker as read_marker
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.recovery.audit import audit_sink
from tidemark.recovery.rollback import plan_rollback

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 10
PHASES = ("start", "planned", "sink-written", "committed")


def _seed() -> int:
    seed = int(os.environ.get("TIDEMARK_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"chaos seed: {seed} (replay with TIDEMARK_CHAOS_SEED={seed})")
    return seed


def _batches(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()} if folder.is_dir() else set()


def _parquet(sink: Path) -> int:
    return sum(1 for _ in sink.rglob("*.parquet"))


def _wait_for(phase: str, root: Path, rng: random.Random, driver: subprocess.Popen[bytes]) -> None:
    """Return at a moment of the chosen phase (or when the driver ends, or after 90 s)."""
    checkpoint, sink = root / "checkpoint", root / "output"
    deadline = time.monotonic() + 90
    if phase == "start":
        time.sleep(rng.uniform(0.5, 8.0))
        return
    offsets, commits, files = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits"), _parquet(sink)
    while driver.poll() is None and time.monotonic() < deadline:
        if phase == "planned" and _batches(checkpoint / "offsets") - offsets:
            break
        if phase == "sink-written" and _parquet(sink) > files and not (_batches(checkpoint / "commits") - commits):
            break
        if phase == "committed" and _batches(checkpoint / "commits") - commits:
            break
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.2))


def run_until_killed(
    argv: list[str],
    wait: Callable[[subprocess.Popen[bytes]], None],
    log: Path | None = None,
    entry: list[str] | None = None,
) -> int:
    """`tidemark <argv>` in its own process group until `wait` returns, then the whole driver (Python and its JVM)
    SIGKILLed if it still runs; its exit code. The one JVM-per-kill harness of the chaos tests. entry: how Python
    starts tidemark (default `-m tidemark.cli.main`; a script that wraps it, e.g. one that kills itself)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with log.open("wb") if log is not None else open(os.devnull, "wb") as output:
        driver = subprocess.Popen(
            [sys.executable, *(entry or ["-m", "tidemark.cli.main"]), *argv],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait(driver)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=60)
    return driver.returncode


@pytest.mark.reliability(fault="driver kill", storage="local", sink="parquet")
def test_ten_kills_in_a_row_then_finish(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data = generate_events(
        tmp_path / "all", events=900, keys=4, files=9, seed=rng.randrange(1000), malformed_fraction=0.03
    )
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    for file in files:
        shutil.copy2(file, tmp_path / "landing" / file.name)
        time.sleep(0.02)
    config_path = write_config(tmp_path, trigger={"mode": "processing-time", "interval": "1 second"})
    plan = [rng.choice(PHASES) for _ in range(KILLS)]
    print(f"kill phases: {plan}")
    for phase in plan:
        run_until_killed(
            ["run", str(config_path), "--available-now"],
            partial(_wait_for, phase, tmp_path, rng),
        )
    assert main(["run", str(config_path), "--available-now"]) == 0

    _assert_matches_oracle(spark, tmp_path / "output", _expected(files))
    records = read_quarantine(str(tmp_path / "quarantine"))
    raws = [r["raw"] for r in records]
    by_batch = {b: len([r for r in records if r["batch_id"] == b]) for b in {r["batch_id"] for r in records}}
    handle = Checkpoint.open(str(tmp_path / "checkpoint"))
    read = handle.source_files_of(handle.commit_batches())
    expected_by_batch = {b: count_malformed([Path(f.removeprefix("file://")) for f in fs]) for b, fs in read.items()}
    detail = f"written {by_batch}, expected {expected_by_batch}, marker {read_marker(str(tmp_path / 'quarantine'))}"
    assert len(raws) == count_malformed(files) and len(set(raws)) == len(raws), f"quarantine not exactly once: {detail}"
    audit = audit_sink(load_config(config_path))
    assert audit.ok, audit.violations


_DIE_AT = """
import os, signal
from tidemark.storage import journal
from tidemark.storage.local import LocalFS
count = {{"n": 0}}
def tick():
    count["n"] += 1
    if count["n"] > {after}:
        os.kill(os.getpid(), signal.SIGKILL)
real_move = journal._Runner.move
def move(self, step):
    tick()
    return real_move(self, step)
real_delete_files = LocalFS.delete_files
def delete_files(self, rels):
    # The journal hands a run of deletes to the store at once: die between two of its files.
    missing = []
    for rel in rels:
        tick()
        missing += real_delete_files(self, [rel])
    return missing
if "{method}" == "move":
    journal._Runner.move = move
else:
    LocalFS.delete_files = delete_files
from tidemark.cli.main import main
main({argv!r})
"""


def _die_during(method: str, argv: list[str], after: int) -> None:
    """Run the CLI in a child that SIGKILLs itself after `after` file moves or file deletes."""
    script = _DIE_AT.format(method=method, after=after, argv=argv)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False, env=os.environ.copy())
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_kill_during_prune_and_rollback_moves_then_rerun(spark: Any, tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data = generate_events(tmp_path / "landing", events=500, keys=3, files=5, seed=rng.randrange(1000))
    config_path = write_config(tmp_path)
    assert main(["run", str(config_path), "--available-now"]) == 0
    checkpoint = tmp_path / "checkpoint"

    # prune --apply dies after a random number of deletes; the rerun finishes the journal, then prunes again.
    reference = tmp_path / "reference"
    shutil.copytree(checkpoint, reference)
    assert main(["checkpoint", "prune", str(reference), "--keep", "4", "--apply"]) in (0, 1)
    deletes = len(prune_checkpoint(str(checkpoint), keep=4).paths)
    assert deletes > 2
    after = rng.randrange(1, deletes - 1)
    print(f"prune dies after {after} of {deletes} deletes")
    _die_during("delete", ["checkpoint", "prune", str(checkpoint), "--keep", "4", "--apply"], after)
    assert main(["checkpoint", "prune", str(checkpoint), "--keep", "4", "--apply"]) in (0, 1)
    assert set(_tree(checkpoint)) == set(_tree(reference))

    # recover --to-batch 1 --apply dies after a random number of moves; every file ends in exactly one place.
    before = {**{f"checkpoint/{k}": v for k, v in _tree(checkpoint).items()}}
    before.update({f"output/{k}": v for k, v in _tree(tmp_path / "output").items()})
    config = load_config(config_path)
    # Not the batch before the last: that last one is the no-data batch that closed the final windows, and
    # Spark runs a no-data batch only after one with data (a restart with no new data would not emit them).
    to_batch = Checkpoint.open(str(checkpoint)).commit_batches()[-3]
    moves = len(plan_rollback(PipelineContext.of(config), to_batch).moves)
    assert moves > 2
    after = rng.randrange(1, moves - 1)
    print(f"rollback to {to_batch} dies after {after} of {moves} moves")
    argv = ["recover", str(config_path), "--to-batch", str(to_batch), "--apply"]
    _die_during("move", argv, after)
    # The dry run over the half-finished rollback says what --apply does first, in one line, and moves nothing.
    dry = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", *argv[:-1]], capture_output=True, text=True, check=False
    )
    errors = [line for line in dry.stderr.splitlines() if line.startswith("error:")]
    assert dry.returncode == 1 and len(errors) == 1, dry.stderr[-2000:]
    assert "is not finished" in errors[0] and f"--to-batch {to_batch} --apply' finishes it first" in errors[0]
    assert list((tmp_path / ".tidemark-archive").glob("journal-*")), "the dry run touched the journal"
    assert main(argv) == 0
    after = {**{f"checkpoint/{k}": v for k, v in _tree(checkpoint).items()}}
    after.update({f"output/{k}": v for k, v in _tree(tmp_path / "output").items()})
    archive = tmp_path / ".tidemark-archive"
    archived = [p for p in archive.rglob("*") if p.is_file() and not p.name.startswith("journal-")]
    assert not list(archive.glob("journal-*"))
    assert len(after) + len(archived) == len(before), "a file was lost or copied twice"
    assert all(before[k] == v for k, v in after.items())
    assert main(["run", str(config_path), "--available-now"]) == 0
    _assert_matches_oracle(spark, tmp_path / "output", _expected(list(data.files)))
