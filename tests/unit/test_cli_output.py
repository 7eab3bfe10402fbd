"""Output for logs and pipes: nothing cut at 80 columns, no progress lines; progress only on a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.checkpoint import synthetic
from tidemark import steps

TIDEMARK = str(Path(sys.executable).with_name("tidemark"))


def test_nothing_is_cut_when_not_on_a_terminal(tmp_path: Path) -> None:
    deep = tmp_path / ("a-folder-with-a-long-name-" * 4) / "checkpoint"
    synthetic.simple(deep, batches=3)
    done = subprocess.run([TIDEMARK, "checkpoint", "inspect", str(deep)], capture_output=True, text=True, check=True)
    assert str(deep) in done.stdout
    assert "…" not in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) > 80
    assert done.stderr == ""  # no progress lines in a pipe


def test_json_output_is_only_json(tmp_path: Path) -> None:
    synthetic.simple(tmp_path / "checkpoint", batches=3)
    done = subprocess.run(
        [TIDEMARK, "checkpoint", "inspect", str(tmp_path / "checkpoint"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["latest_committed_batch"] == 2
    assert done.stderr == ""


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, description: str, total: int | None) -> object:
        self.events.append(("start", (description, total)))
        return len(self.events)

    def advance(self, handle: object, amount: int) -> None:
        self.events.append(("advance", amount))

    def end(self, handle: object) -> None:
        self.events.append(("end", handle))


def test_steps_reach_the_display_only_when_one_is_set(tmp_path: Path) -> None:
    from tidemark.doctor.prune import prune_checkpoint

    root = synthetic.simple(tmp_path / "checkpoint", batches=6, kind="snapshot")
    with steps.step("nothing shown") as advance:
        advance(3)  # no display: a no-op
    recorder = _Recorder()
    steps.show_with(recorder)
    try:
        result = prune_checkpoint(str(root), keep=1, apply=True)
    finally:
        steps.show_with(None)
    started = [e[1] for e in recorder.events if e[0] == "start"]
    assert ("prune: removing files", result.files) in started
    assert any(str(d).startswith("listing ") for d, _ in started)  # type: ignore[misc]
    removed = [e for e in recorder.events if e[0] == "advance"]
    assert sum(int(a) for _, a in removed) >= result.files  # type: ignore[call-overload]
    assert not (root / "_tidemark").exists()  # the journal's folders went with the journal
