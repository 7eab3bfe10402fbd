"""Eight driver kills at random moments on a Delta sink (#38), the harness of tests/integration/test_chaos.py: while
the JVM starts, right after a batch is planned, once a batch's data files are in the table folder before its Delta
commit, right after its Delta commit and before Spark's `commits/<n>`, right after that commit. Each kill takes the
whole driver (Python and its JVM); the run is restarted each time, then left to finish. The table, read with
delta-rs, equals the pandas oracle with no (key, window) twice; the quarantine holds each malformed line once;
audit finds each committed batch's commit exactly once.

The seed is printed; set TIDEMARK_CHAOS_SEED to replay a failure.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest

from tests.helpers import write_config
from tests.integration.test_chaos import _batches, _parquet, _seed, run_until_killed
from tests.integration.test_delta_sink import _assert_exact, _run
from tests.integration.test_recovery import _expected
from tests.oracles import count_malformed
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.recovery.audit import audit_sink

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 8
PHASES = ("start", "planned", "files-written", "delta-committed", "committed")


def _delta_commits(table: Path) -> int:
    return sum(1 for _ in (table / "_delta_log").glob("*.json")) if (table / "_delta_log").is_dir() else 0


def _wait_for(phase: str, root: Path, rng: random.Random, driver: subprocess.Popen[bytes]) -> None:
    """Return at a moment of the chosen phase (or when the driver ends, or after 90 s)."""
    checkpoint, table = root / "checkpoint", root / "output"
    deadline = time.monotonic() + 90
    if phase == "start":
        time.sleep(rng.uniform(0.5, 8.0))
        return
    offsets, commits = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
    files, logged = _parquet(table), _delta_commits(table)
    while driver.poll() is None and time.monotonic() < deadline:
        new_commit = bool(_batches(checkpoint / "commits") - commits)
        if phase == "planned" and _batches(checkpoint / "offsets") - offsets:
            break
        if phase == "files-written" and _parquet(table) > files and _delta_commits(table) == logged:
            break
        if phase == "delta-committed" and _delta_commits(table) > logged and not new_commit:
            break
        if phase == "committed" and new_commit:
            break
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.05 if phase == "delta-committed" else 0.2))


def test_eight_driver_kills_on_a_delta_sink_then_finish(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data = generate_events(
        tmp_path / "all", events=800, keys=4, files=8, seed=rng.randrange(1000), malformed_fraction=0.03
    )
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    for file in files:
        shutil.copy2(file, tmp_path / "landing" / file.name)
        time.sleep(0.02)
    config_path = write_config(
        tmp_path,
        sink={"format": "delta", "path": "output"},
        trigger={"mode": "processing-time", "interval": "1 second"},
    )
    plan = [rng.choice(PHASES) for _ in range(KILLS)]
    print(f"kill phases: {plan}")
    for phase in plan:
        run_until_killed(
            ["run", str(config_path), "--available-now"],
            partial(_wait_for, phase, tmp_path, rng),
        )
    finish = _run(config_path)
    assert finish.returncode == 0, finish.stderr[-2000:]

    _assert_exact(tmp_path / "output", _expected(files))
    raws = [r["raw"] for r in read_quarantine(str(tmp_path / "quarantine"))]
    assert len(raws) == count_malformed(files) and len(set(raws)) == len(raws)
    audit = audit_sink(load_config(config_path))
    assert audit.ok, audit.violations
    assert main(["audit", str(config_path)]) == 0
