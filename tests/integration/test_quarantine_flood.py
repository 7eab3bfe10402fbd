"""Issue 15.2: a batch of a million malformed lines at a 1 GB driver finishes; the quarantine holds every one
of them exactly once and the progress log's line for that batch stays small (counts and one sample only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.formats import progress_log_files
from tidemark.pipeline.quarantine import iter_quarantine

pytestmark = pytest.mark.integration

MALFORMED = 1_000_000
GOOD = 50


def test_a_million_malformed_lines_at_a_one_gigabyte_driver(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    with (landing / "flood.json").open("w") as out:
        for i in range(GOOD):
            event = {"event_id": i, "user": f"u{i % 3}", "ts": f"2026-01-01T00:{i % 60:02d}:00Z", "value": 1.0}
            out.write(json.dumps(event) + "\n")
        out.writelines(f"not json at all {i}\n" for i in range(MALFORMED))
    config = write_config(
        tmp_path,
        spark={"driver_memory": "1g", "master": "local[2]", "shuffle_partitions": 2},
        source={"max_files_per_trigger": None},
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen: set[str] = set()
    count = 0
    for record in iter_quarantine(str(tmp_path / "quarantine")):
        count += 1
        seen.add(record["raw"])
        assert record["batch_id"] == 0 and record["reason"] == "unparseable record"
    assert count == MALFORMED and len(seen) == MALFORMED  # every line once, none twice
    batch_lines = []
    for file in progress_log_files(tmp_path / "checkpoint-monitor"):
        with open(file, "rb") as handle:
            batch_lines.extend(line for line in handle if b'"type":"progress"' in line.replace(b" ", b""))
    assert batch_lines, "the run wrote no progress line"
    assert max(len(line) for line in batch_lines) < 64 * 1024
    first = json.loads(batch_lines[0])
    observed = first["progress"]["observedMetrics"]["tidemark_quarantine"]
    assert int(observed["count"]) == MALFORMED
