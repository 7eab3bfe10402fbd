"""The progress log writer: append-only lines the reader reads back, durable across a killed writer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

from tidemark.compat import UTC
from tidemark.formats import ProgressLogWriter, log_path_for, read_progress, read_progress_log, utc_now_text


def test_lines_have_type_utc_time_and_run_id(tmp_path: Path) -> None:
    path = log_path_for(tmp_path / "monitor", "run-1")
    writer = ProgressLogWriter(path, "run-1")
    writer.open()
    progress = {"id": "q", "runId": "r", "batchId": 3, "batchDuration": 120, "numInputRows": 7, "name": "x"}
    writer.write("progress", time=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), progress=progress)
    writer.write("warning", message="hello")
    writer.close()
    writer.close()
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert lines[0] == {"type": "progress", "time": "2026-01-02T03:04:05.678Z", "run_id": "run-1", "progress": progress}
    assert lines[1]["type"] == "warning" and lines[1]["time"].endswith("Z")
    assert [p.batch_id for p in read_progress(path)] == [3]


def test_reopening_appends_never_truncates(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    for n in range(2):
        writer = ProgressLogWriter(path, "r")
        writer.open()
        writer.write("warning", n=n)
        writer.close()
    assert [e.data["n"] for e in read_progress_log(path)] == [0, 1]


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    writer = ProgressLogWriter(path, "r", fsync=False)
    writer.open()
    payload = "x" * 20_000  # longer than any stdio buffer: one write call per line still keeps lines whole

    def work(k: int) -> None:
        for i in range(20):
            writer.write("warning", k=k, i=i, payload=payload)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    events = read_progress_log(path)
    assert len(events) == 80
    assert sorted((e.data["k"], e.data["i"]) for e in events) == [(k, i) for k in range(4) for i in range(20)]


def test_lines_survive_a_killed_process_and_a_torn_tail_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    script = (
        "import os, sys\n"
        "from tidemark.formats.progress_writer import ProgressLogWriter\n"
        f"w = ProgressLogWriter({str(path)!r}, 'r')\n"
        "w.open()\n"
        "for i in range(5):\n"
        "    w.write('warning', i=i)\n"
        'os.write(w._sink._fd, b\'{"type": "progress", "tim\')\n'  # a crash in the middle of a line
        "os._exit(9)\n"  # no flush, no close, no atexit: like a killed driver
    )
    done = subprocess.run([sys.executable, "-c", script], check=False)
    assert done.returncode == 9
    assert [e.data["i"] for e in read_progress_log(path)] == [0, 1, 2, 3, 4]


def test_utc_now_text_is_utc_with_z() -> None:
    text = utc_now_text()
    assert text.endswith("Z") and len(text) == len("2026-01-01T00:00:00.000Z")
