"""The event generator: reproducible, ordered by arrival, late and malformed shares as asked."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events


def _lines(files: tuple[Path, ...]) -> list[str]:
    return [ln for f in files for ln in f.read_text().splitlines()]


def test_reproducible_and_counts(tmp_path: Path) -> None:
    a = generate_events(tmp_path / "a", 2000, 10, 4, seed=5, late_fraction=0.05, malformed_fraction=0.05)
    b = generate_events(tmp_path / "b", 2000, 10, 4, seed=5, late_fraction=0.05, malformed_fraction=0.05)
    assert _lines(a.files) == _lines(b.files)
    good = []
    for line in _lines(a.files):
        try:
            good.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    total = len(_lines(a.files))
    assert total == 2000 + a.malformed_lines
    assert 40 < a.malformed_lines < 160 and 40 < a.late_events < 160
    ids = [r["event_id"] for r in good if isinstance(r, dict) and "event_id" in r]
    assert set(range(2000)) <= set(ids)
    assert len({r["user"] for r in good if isinstance(r, dict) and "user" in r}) == 10


def test_out_of_order_within_delay_and_late_events(tmp_path: Path) -> None:
    result = generate_events(tmp_path, 3000, 5, 6, seed=2, late_fraction=0.02, max_delay=timedelta(minutes=5))
    from datetime import datetime

    seen_max = None
    late = 0
    out_of_order = 0
    for file in result.files:
        batch_max = None
        for line in file.read_text().splitlines():
            when = datetime.fromisoformat(json.loads(line)["ts"].replace("Z", "+00:00"))
            if seen_max is not None and when < seen_max - timedelta(minutes=10):
                late += 1
            if batch_max is not None and when < batch_max:
                out_of_order += 1
            batch_max = when if batch_max is None else max(batch_max, when)
        seen_max = batch_max if seen_max is None else max(seen_max, batch_max)
    assert late == result.late_events
    assert out_of_order > 100
    mtimes = [os.stat(f).st_mtime for f in result.files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)


@pytest.mark.parametrize("args", [["--events", "0"], ["--late-fraction", "1.5"]])
def test_cli_rejects_bad_numbers(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(tmp_path), *args]) == 2
    assert "error" in capsys.readouterr().err


def test_cli_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(tmp_path), "--events", "100", "--files", "3", "--malformed-fraction", "0.1"]) == 0
    assert "wrote 100 events" in capsys.readouterr().out
    assert len(list(tmp_path.glob("events-*.json"))) == 3
