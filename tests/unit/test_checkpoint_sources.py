"""What each batch of a file source read, from its plain log files or, once Spark dropped them, the compact."""

from __future__ import annotations

import json
from pathlib import Path

from tidemark.checkpoint.handle import Checkpoint


def _write(folder: Path, name: str, entries: list[tuple[str, int]]) -> None:
    lines = ["v1", *(json.dumps({"path": p, "timestamp": 0, "batchId": b}) for p, b in entries)]
    (folder / name).write_text("\n".join(lines))


def test_plain_files_first_compact_where_they_are_gone(tmp_path: Path) -> None:
    folder = tmp_path / "sources" / "0"
    folder.mkdir(parents=True)
    everything = [(f"file:///in/{b}-{i}.json", b) for b in range(12) for i in range(2)]
    _write(folder, "9.compact", [e for e in everything if e[1] <= 9])  # Spark deleted 0..8 after compacting
    for batch in (10, 11):
        _write(folder, str(batch), [e for e in everything if e[1] == batch])
    checkpoint = Checkpoint.open(str(tmp_path))
    wanted = [3, 9, 11]
    found = checkpoint.source_files_of(wanted)
    assert found == {b: [p for p, e in everything if e == b] for b in wanted}
    assert found == {b: checkpoint.source_files_by_batch()[b] for b in wanted}
    assert checkpoint.source_files_of([40]) == {}  # a batch no log covers
