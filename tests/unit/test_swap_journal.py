"""A checkpoint swap's journal is ordered (#39): its second move fills the folder its first one emptied, so a
rerun after a kill in the second move must not replay the first (which would carry the new checkpoint's files
into the archive). Reproduced on a local disk with the state a kill leaves on an object store, where a folder
move is a copy and a delete per file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.formats import finish_checkpoint_swaps
from tidemark.formats.swap import checkpoint_archive, swap_names
from tidemark.storage import open_storage, parse_location
from tidemark.storage.journal import Step, run_journal, write_journal


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}


def _killed_in_the_second_move(tmp_path: Path, ordered: bool) -> tuple[Path, Path, str]:
    """The folders as a swap killed half-way through its second move leaves them, and its journal."""
    from datetime import datetime

    from tidemark.compat import UTC

    checkpoint = parse_location(str(tmp_path / "checkpoint"))
    archive, staging = swap_names(checkpoint, datetime(2026, 11, 28, tzinfo=UTC))
    old, new = Path(archive.key), Path(tmp_path / "checkpoint")
    for rel in ("offsets/0", "commits/0", "state/0/0/1.delta"):  # the first move: done, the old one archived
        (old / rel).parent.mkdir(parents=True, exist_ok=True)
        (old / rel).write_text(f"old {rel}")
    moved, left = ("offsets/0", "commits/0"), ("state/0/0/1.snapshot", "state/0/1/1.snapshot")
    for folder, rels in ((new, moved), (Path(staging.key), left)):  # the second: two files moved, two to go
        for rel in rels:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(f"new {rel}")
    folder = checkpoint_archive(checkpoint)
    steps = [
        Step(("parent", "checkpoint"), ("parent", f"{folder.name}/{archive.name}")),
        Step(("parent", f"{folder.name}/{staging.name}"), ("parent", "checkpoint")),
    ]
    journal = write_journal(folder, {"parent": checkpoint.parent.uri}, steps, "repartition", {}, ordered=ordered)
    if ordered:  # the journal recorded its first move as finished
        location = parse_location(journal)
        store = open_storage(location.parent)
        body = json.loads(store.read_bytes(location.name) or b"{}")
        store.write_atomic(location.name, json.dumps({**body, "done": 1}).encode())
    return new, old, journal


def test_a_rerun_finishes_the_second_move_only(tmp_path: Path) -> None:
    new, old, _ = _killed_in_the_second_move(tmp_path, ordered=True)
    results = finish_checkpoint_swaps(str(new))
    assert [r.purpose for r in results] == ["repartition"]
    rels = ("offsets/0", "commits/0", "state/0/0/1.snapshot", "state/0/1/1.snapshot")
    assert _tree(new) == {rel: f"new {rel}" for rel in rels}
    assert _tree(old) == {rel: f"old {rel}" for rel in ("offsets/0", "commits/0", "state/0/0/1.delta")}
    assert not list(new.parent.glob(".tidemark-archive/journal-*"))


def test_an_unordered_journal_would_move_the_new_files_into_the_archive(tmp_path: Path) -> None:
    """Why the swap's journal is ordered: replaying its first move takes the new files away."""
    new, old, journal = _killed_in_the_second_move(tmp_path, ordered=False)
    run_journal(journal)
    assert "offsets/0" not in _tree(new)  # the new checkpoint lost the files the second move had placed
    assert _tree(old)["offsets/0"] == "new offsets/0"  # and overwrote the old checkpoint's copy in the archive


def test_run_finishes_a_killed_swap_before_it_plans_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tidemark run`'s plan reads the checkpoint (its store, its state's size): a swap killed half-way is finished
    first, so the plan sees the new checkpoint whole, not the half a kill left."""
    from tests.helpers import write_config
    from tidemark.config import load_config
    from tidemark.pipeline.run import run_pipeline
    from tidemark.sizing import store_start

    new, _, _ = _killed_in_the_second_move(tmp_path, ordered=True)
    (tmp_path / "landing").mkdir()
    seen: list[dict[str, str]] = []

    def plan_start(config: object) -> None:
        seen.append(_tree(new))
        raise _Planned

    monkeypatch.setattr(store_start, "plan_start", plan_start)
    with pytest.raises(_Planned):
        run_pipeline(load_config(write_config(tmp_path)))
    rels = ("offsets/0", "commits/0", "state/0/0/1.snapshot", "state/0/1/1.snapshot")
    assert seen == [{rel: f"new {rel}" for rel in rels}]
    assert not list(tmp_path.glob(".tidemark-archive/journal-*"))


class _Planned(Exception):
    """Stops the run where its start is planned (no JVM in a unit test)."""
