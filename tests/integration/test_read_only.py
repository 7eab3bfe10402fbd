"""Read-only commands write nothing anywhere: not under the checkpoint, nor the sink, the landing folder, the
quarantine or the progress log (issue 37: only the checkpoint folder was compared before). Every file and folder
of the pipeline's tree is compared by path, size and modification time before and after each command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.integration]


def _tree(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every path under root: (is a folder, size, modification time in ns)."""
    return {
        str(p.relative_to(root)): (p.is_dir(), 0 if p.is_dir() else p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
    }


def test_every_read_only_command_writes_nothing_under_the_pipeline(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "pipeline"
    generate_events(root / "landing", events=300, keys=4, files=3, seed=11, malformed_fraction=0.05)
    config = str(write_config(root, source={"max_files_per_trigger": 1}))
    assert main(["run", config, "--available-now"]) == 0
    [log] = sorted((root / "checkpoint-monitor").glob("*.jsonl"))
    checkpoint, sink = str(root / "checkpoint"), str(root / "output")
    commands = [
        ["checkpoint", "inspect", checkpoint, "--sink", sink],
        ["checkpoint", "prune", checkpoint, "--keep", "1"],
        ["check", config],
        ["audit", config],
        ["recover", config],
        ["recover", config, "--to-batch", "1"],
        ["state", "stats", checkpoint],
        ["state", "show", checkpoint],
        ["state", "diff", checkpoint, "--from", "1", "--to", "2"],
        ["state", "expired", checkpoint],
        ["state", "repartition", checkpoint, "--partitions", "3"],
        ["analyze", str(log)],
        ["plan", "memory", "--config", config, "--from-log", str(log)],
        ["plan", "checkpoint", str(log)],
    ]
    before = _tree(root)
    assert len(before) > 30
    changed = {}
    for argv in commands:
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 1), (argv, err)  # 1: a finding at or above the threshold, never a usage error
        after = _tree(root)
        if after != before:
            changed[" ".join(argv[:2])] = sorted(set(after.items()) ^ set(before.items()))[:5]
            before = after
    assert changed == {}
