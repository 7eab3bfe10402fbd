"""What a `state repartition --apply` killed before its swap leaves, and who removes it (issue 58): the staged copy
beside the checkpoint, removed by the next `--apply` once its writer is known dead, and the local scratch folder,
removed likewise; a copy or folder whose writer may still run is left. On a local disk, without a JVM (the kills
themselves: tests/storage/test_repartition_kills.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tidemark.compat import UTC
from tidemark.evolve import repartition
from tidemark.evolve.repartition import SCRATCH_PREFIX, scratch_owner
from tidemark.formats import claim_staging, finish_checkpoint_swaps, remove_abandoned_stagings, swap_in
from tidemark.formats.swap import OWNER_SUFFIX, checkpoint_archive, swap_names
from tidemark.storage import Location, parse_location
from tidemark.storage.journal import Step, write_journal


def _dead_pid() -> int:
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(process.stdout)


def _staged(tmp_path: Path, stamp: int, files: int = 2) -> Location:
    checkpoint = parse_location(str(tmp_path / "checkpoint"))
    _, staging = swap_names(checkpoint, datetime(2026, 12, 3, 10, stamp, tzinfo=UTC))
    claim_staging(staging)
    for index in range(files):
        path = Path(staging.key) / "state" / "0" / str(index) / "2.snapshot"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("new")
    return staging


def _owner(staging: Location, host: str, pid: int) -> None:
    record = Path(f"{staging.key}{OWNER_SUFFIX}")
    record.write_text(json.dumps({"host": host, "pid": pid, "started": "2026-12-03T10:00:00+00:00"}))


def test_a_staged_copy_whose_writer_died_is_removed_and_the_others_are_kept(tmp_path: Path) -> None:
    (tmp_path / "checkpoint" / "offsets").mkdir(parents=True)
    (tmp_path / "checkpoint" / "offsets" / "0").write_text("v1")
    dead, alive, elsewhere = _staged(tmp_path, 1), _staged(tmp_path, 2), _staged(tmp_path, 3)
    _owner(dead, socket.gethostname(), _dead_pid())
    _owner(elsewhere, "another-host", _dead_pid())  # alive: this process's own record, as claim_staging wrote it

    removed, kept = remove_abandoned_stagings(parse_location(str(tmp_path / "checkpoint")))

    assert removed == [dead.uri]
    assert sorted(kept) == sorted([alive.uri, elsewhere.uri])
    assert not Path(dead.key).exists() and not Path(f"{dead.key}{OWNER_SUFFIX}").exists()
    assert Path(alive.key).exists() and Path(elsewhere.key).exists()
    assert (tmp_path / "checkpoint" / "offsets" / "0").read_text() == "v1"


def test_nothing_is_removed_beside_a_swap_not_finished(tmp_path: Path) -> None:
    checkpoint = parse_location(str(tmp_path / "checkpoint"))
    dead = _staged(tmp_path, 1)
    _owner(dead, socket.gethostname(), _dead_pid())
    folder = checkpoint_archive(checkpoint)
    step = Step(("parent", f"{folder.name}/{dead.name}"), ("parent", "checkpoint"))
    write_journal(folder, {"parent": checkpoint.parent.uri}, [step], "repartition", {}, ordered=True)

    assert remove_abandoned_stagings(checkpoint) == ([], [])
    assert Path(dead.key).exists()


@pytest.mark.parametrize("killed", [False, True])
def test_the_swap_drops_the_owner_record_of_the_copy_it_moved_in(tmp_path: Path, killed: bool) -> None:
    """Whether the swap ran through or a kill left its journal for the next run: the staged copy is now the
    checkpoint, and its owner record goes with the journal."""
    checkpoint = parse_location(str(tmp_path / "checkpoint"))
    (tmp_path / "checkpoint" / "offsets").mkdir(parents=True)
    (tmp_path / "checkpoint" / "offsets" / "0").write_text("old")
    staging = _staged(tmp_path, 1)
    archive, _ = swap_names(checkpoint, datetime(2026, 12, 3, 10, 1, tzinfo=UTC))
    if killed:
        from tidemark.storage import journal

        real = journal.run_journal
        journal.run_journal = lambda *_args, **_kwargs: None  # type: ignore[assignment,return-value]
        try:
            swap_in(checkpoint, archive, staging)  # the journal written, nothing moved: as a kill leaves it
        finally:
            journal.run_journal = real
        assert Path(f"{staging.key}{OWNER_SUFFIX}").exists()
        finish_checkpoint_swaps(checkpoint)
    else:
        swap_in(checkpoint, archive, staging)
    names = sorted(p.name for p in Path(checkpoint_archive(checkpoint).key).iterdir())
    assert names == [archive.name]
    assert (Path(archive.key) / "offsets" / "0").read_text() == "old"
    assert (tmp_path / "checkpoint" / "state" / "0" / "1" / "2.snapshot").read_text() == "new"


def test_scratch_folders_of_dead_repartitions_on_this_host_are_removed(tmp_path: Path) -> None:
    here = socket.gethostname()
    dead, alive, elsewhere, other = (
        tmp_path / f"{SCRATCH_PREFIX}{here}-{_dead_pid()}-ab_c1",
        tmp_path / f"{SCRATCH_PREFIX}{here}-{repartition.os.getpid()}-x9y",
        tmp_path / f"{SCRATCH_PREFIX}other-host-{_dead_pid()}-x9y",
        tmp_path / "read-x9y",
    )
    for folder in (dead, alive, elsewhere, other):
        (folder / "checkpoint").mkdir(parents=True)
    assert scratch_owner(elsewhere.name) == ("other-host", int(elsewhere.name.split("-")[-2]))
    assert scratch_owner(other.name) is None

    repartition._remove_dead_scratch(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (alive, elsewhere, other))
