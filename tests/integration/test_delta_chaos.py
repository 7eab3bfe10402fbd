"""Eight driver kills at random moments on a Delta sink (#38), the harness of tests/driver_kills.py: while
the JVM starts, right after a batch is planned, once a batch's data files are in the table folder before its Delta
commit, right after its Delta commit and before Spark's `commits/<n>`, right after that commit. Each kill takes the
whole driver (Python and its JVM); the run is restarted each time, then left to finish. The table, read with
delta-rs, equals the pandas oracle with no (key, window) twice; the quarantine holds each malformed line once;
audit finds each committed batch's commit exactly once.

Where each kill landed is read off the checkpoint and the table once the driver is dead (a batch's files without
their commit, a Delta commit without Spark's, ...); a kill that missed its moment (the batch went past it, the
run ended) is tried again with more files landed, and the test fails when a moment was never reached. The kill
between Delta's commit and Spark's comes from inside the driver, right after a random batch's commit returned:
that moment lasts milliseconds, and a watcher outside hit it in about one try of five.

The seed is printed; set TIDEMARK_CHAOS_SEED to replay a failure.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.driver_kills import Landing, kill_in_each_phase, kill_plan
from tests.helpers import write_config
from tests.integration.test_chaos import _seed
from tests.integration.test_delta_sink import _assert_exact, _run
from tests.integration.test_recovery import _expected
from tests.oracles import count_malformed
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.formats import read_sink_transaction
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.recovery.audit import audit_sink
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 8
TRIES = 6  # per kill: the moment between Delta's commit and Spark's lasts milliseconds
# Files landed in all: the first 3, 2 more after each kill that missed its moment, the rest before the finish. The
# generated reserve (RESERVE) is landed only when missed kills ask for more than LANDED: a run of few misses
# finishes on LANDED files (fewer batches to run), one of many misses still has batches to reach its moments in.
LANDED = 10
RESERVE = 16


def _delta_commits(table: Path) -> int:
    return sum(1 for _ in (table / "_delta_log").glob("*.json")) if (table / "_delta_log").is_dir() else 0


def _orphans(table: Path) -> int:
    """Data files in the table folder that no commit of its log added: a batch's files written before its commit."""
    from urllib.parse import unquote

    added = set()
    for commit in (table / "_delta_log").glob("*.json") if (table / "_delta_log").is_dir() else ():
        for line in commit.read_text().splitlines():
            if line.startswith('{"add"'):
                added.add(unquote(json.loads(line)["add"]["path"]))
    on_disk = {str(p.relative_to(table)) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}
    return len(on_disk - added)


@dataclass(frozen=True)
class DeltaProbe:
    """The kills' view of a Delta table: its log's commits, and the newest batch its transaction version names."""

    folder: Path

    def commits(self) -> int:
        return _delta_commits(self.folder)

    def orphans(self) -> int:
        return _orphans(self.folder) if self.folder.is_dir() else 0

    def newest_batch(self, checkpoint: Path) -> int | None:
        transaction = read_sink_transaction(open_storage(str(checkpoint)))
        # The log's folder comes before its first commit (delta-rs then finds no table: "No files in log segment").
        if transaction is None or self.commits() == 0:
            return None
        from deltalake import DeltaTable

        found = DeltaTable(str(self.folder)).transaction_version(transaction.app_id)
        return None if found is None else transaction.batch_of(found)


@pytest.mark.reliability(fault="driver kill", storage="local", sink="delta")
def test_eight_driver_kills_on_a_delta_sink_then_finish(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data = generate_events(
        tmp_path / "all", events=100 * RESERVE, keys=4, files=RESERVE, seed=rng.randrange(1000), malformed_fraction=0.03
    )
    landing = Landing(list(data.files), tmp_path / "landing")
    land, files = landing.land, landing.files  # files: those landed so far, the oracle's input

    land(3)
    config_path = write_config(
        tmp_path,
        sink={"format": "delta", "path": "output"},
        trigger={"mode": "processing-time", "interval": "1 second"},
    )
    plan = kill_plan(rng, KILLS)
    print(f"kill phases: {plan}")
    reached, tries = kill_in_each_phase(
        plan, config=config_path, root=tmp_path, table=DeltaProbe(tmp_path / "output"), rng=rng, land=land, tries=TRIES
    )
    print(f"kills landed: {dict(reached)} in {dict(tries)} tries")
    assert reached == Counter(plan), f"kill moments never reached: {Counter(plan) - reached}"
    land(LANDED - len(files))
    print(f"files landed: {len(files)} of {RESERVE}")
    finish = _run(config_path)
    assert finish.returncode == 0, finish.stderr[-2000:]

    _assert_exact(tmp_path / "output", _expected(files))
    raws = [r["raw"] for r in read_quarantine(str(tmp_path / "quarantine"))]
    assert len(raws) == count_malformed(files) and len(set(raws)) == len(raws)
    audit = audit_sink(load_config(config_path))
    assert audit.ok, audit.violations
    assert main(["audit", str(config_path)]) == 0
