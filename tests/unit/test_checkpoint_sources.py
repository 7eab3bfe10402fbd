"""What each query batch read from a file source: the source log entries between its predecessor's logOffset
and its own (the two numberings drift apart with no-data batches and restarts), from each entry's own log file
or, once Spark dropped those, from the compact file."""

from __future__ import annotations

import json
from pathlib import Path

from tidemark.formats import Checkpoint


def _write(folder: Path, name: str, entries: list[tuple[str, int]]) -> None:
    lines = ["v1", *(json.dumps({"path": p, "timestamp": 0, "batchId": b}) for p, b in entries)]
    (folder / name).write_text("\n".join(lines))


def _offsets(root: Path, log_offsets: list[int]) -> None:
    (root / "offsets").mkdir(parents=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    for batch, value in enumerate(log_offsets):
        (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({'logOffset': value})}")


def test_query_batches_map_to_source_entries_through_the_offsets(tmp_path: Path) -> None:
    folder = tmp_path / "sources" / "0"
    folder.mkdir(parents=True)
    entries = [(f"file:///in/{i}.json", i) for i in range(13)]
    _write(folder, "9.compact", [e for e in entries if e[1] <= 9])  # Spark dropped 0..8 after compacting
    for source_id in (10, 11, 12):
        _write(folder, str(source_id), [e for e in entries if e[1] == source_id])
    # Query batch 2 is a no-data batch; batch 4 read two entries (a restart left entry 4 unused by batch 3).
    _offsets(tmp_path, [0, 1, 1, 3, 5, 11, 12])
    checkpoint = Checkpoint.open(str(tmp_path))
    found = checkpoint.source_files_of([0, 2, 4, 5, 6, 40])
    assert found == {
        0: ["file:///in/0.json"],
        2: [],
        4: ["file:///in/4.json", "file:///in/5.json"],
        5: [f"file:///in/{i}.json" for i in range(6, 12)],
        6: ["file:///in/12.json"],
    }
