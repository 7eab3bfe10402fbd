"""Eight driver kills at random moments on an Iceberg sink (Hadoop catalog, local warehouse), the harness of
tests/driver_kills.py: while the JVM starts, right after a batch is planned, once a batch's data files are in the
table's folder before Iceberg's commit, right after Iceberg's commit and before Spark's `commits/<n>`, right after
that commit. Each kill takes the whole driver (Python and its JVM); the run is restarted each time, then left to
finish. The table, read with pyiceberg from its newest metadata file, equals the pandas oracle with no (key, window)
twice; the quarantine holds each malformed line once; audit finds each committed batch's snapshot exactly once.

The first kill after Iceberg's commit also puts `version-hint.text` one version back: the state a kill between the
Hadoop catalog's rename of `v<N>.metadata.json` and its write of the hint leaves (Iceberg reads past the hint to
the newest `v<N>`, and so must tidemark's check of the table's history, or the batch is appended twice).

The seed is printed; set TIDEMARK_CHAOS_SEED to replay a failure.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.driver_kills import TABLE_COMMITTED, Landing, kill_in_each_phase, kill_plan
from tests.helpers import write_config
from tests.integration.test_chaos import _seed
from tests.integration.test_delta_sink import _run  # a fresh `tidemark run` process (any sink)
from tests.integration.test_iceberg_sink import SINK, _assert_exact, _ours
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
TRIES = 6  # per kill: a moment missed (the batch went past it) is tried again with two more files
# Files landed in all: the first 3, 2 more after each kill that missed its moment, the rest before the finish (the
# reserve only when misses ask for more). Small: each kill is a JVM of its own, and the finish runs every batch left.
LANDED = 6
RESERVE = 14
METADATA_FILE = re.compile(r"v(\d+)\.metadata\.json")


def _versions(table: Path) -> list[int]:
    """The table's metadata versions (a kill may leave a `<uuid>.metadata.json` never renamed: not a version)."""
    folder = table / "metadata"
    names = (METADATA_FILE.fullmatch(p.name) for p in folder.iterdir()) if folder.is_dir() else ()
    return sorted(int(m.group(1)) for m in names if m is not None)


def _newest(table: Path) -> dict[str, Any] | None:
    """The newest metadata file's content: the highest v<N>, as Iceberg's Hadoop catalog reads past its hint."""
    versions = _versions(table)
    if not versions:
        return None
    found: dict[str, Any] = json.loads((table / "metadata" / f"v{versions[-1]}.metadata.json").read_text())
    return found


@dataclass(frozen=True)
class IcebergProbe:
    """The kills' view of an Iceberg table of a Hadoop catalog, read from its metadata files as JSON."""

    folder: Path

    def commits(self) -> int:
        return len(_versions(self.folder))

    def orphans(self) -> int:
        """Data files on disk beyond the current snapshot's total (the test appends only: no file is removed)."""
        metadata = _newest(self.folder)
        current = _current(metadata)
        held = int(current["summary"].get("total-data-files", 0)) if current is not None else 0
        on_disk = sum(1 for p in self.folder.rglob("*.parquet") if "metadata" not in p.parts)
        return on_disk - held

    def newest_batch(self, checkpoint: Path) -> int | None:
        """The newest batch whose snapshot (this checkpoint's transaction version) is in the current lineage."""
        transaction = read_sink_transaction(open_storage(str(checkpoint)))
        metadata = _newest(self.folder)
        if transaction is None or metadata is None:
            return None
        by_id = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
        versions = []
        snapshot = _current(metadata)
        while snapshot is not None:
            summary = snapshot.get("summary", {})
            if summary.get("tidemark.app") == transaction.app_id and "tidemark.version" in summary:
                versions.append(int(summary["tidemark.version"]))
            snapshot = by_id.get(snapshot.get("parent-snapshot-id"))
        return transaction.batch_of(max(versions)) if versions else None


def _current(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    if metadata is None or metadata.get("current-snapshot-id") in (None, -1):
        return None
    return next((s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"]), None)


def test_eight_driver_kills_on_an_iceberg_sink_then_finish(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    data = generate_events(
        tmp_path / "all", events=40 * RESERVE, keys=3, files=RESERVE, seed=rng.randrange(1000), malformed_fraction=0.03
    )
    landing = Landing(list(data.files), tmp_path / "landing")
    land, files = landing.land, landing.files  # files: those landed so far, the oracle's input

    table = tmp_path / "warehouse" / "lake" / "clicks"
    hint = table / "metadata" / "version-hint.text"
    behind: list[int] = []

    def hint_behind(phase: str) -> None:
        """Once: the hint one version back, as a kill between Iceberg's metadata rename and its hint write."""
        if phase == TABLE_COMMITTED and not behind:
            newest = _versions(table)[-1]
            assert int(hint.read_text().strip()) == newest
            hint.write_text(str(newest - 1))
            behind.append(newest)

    land(3)
    config_path = write_config(tmp_path, sink=SINK, trigger={"mode": "processing-time", "interval": "1 second"})
    plan = kill_plan(rng, KILLS)
    print(f"kill phases: {plan}")
    reached, tries = kill_in_each_phase(
        plan,
        config=config_path,
        root=tmp_path,
        table=IcebergProbe(table),
        rng=rng,
        land=land,
        tries=TRIES,
        after_kill=hint_behind,
    )
    print(f"kills landed: {dict(reached)} in {dict(tries)} tries; hint put back behind v{behind}")
    assert reached == Counter(plan), f"kill moments never reached: {Counter(plan) - reached}"
    assert behind, "no kill after Iceberg's commit put the hint back"
    land(LANDED - len(files))
    print(f"files landed: {len(files)} of {RESERVE}")
    finish = _run(config_path)
    assert finish.returncode == 0, finish.stderr[-2000:]

    # The finish committed, so the hint names the newest metadata file again (the reader below opens the hint's).
    assert int(hint.read_text().strip()) == _versions(table)[-1]
    _assert_exact(table, _expected(files))
    commits = {int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*")}
    assert _ours(table, "tidemark:t") == list(range(max(commits) + 1))  # one snapshot per batch, none twice
    raws = [r["raw"] for r in read_quarantine(str(tmp_path / "quarantine"))]
    assert len(raws) == count_malformed(files) and len(set(raws)) == len(raws)
    audit = audit_sink(load_config(config_path))
    assert audit.ok, audit.violations
    assert main(["audit", str(config_path)]) == 0
