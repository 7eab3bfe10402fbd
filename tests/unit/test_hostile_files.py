"""Issue 15.6: hostile files under every command that reads a checkpoint or a progress log.

Each recorded real checkpoint (tests/fixtures/spark35) and a recorded progress log get one of their files
truncated, emptied, replaced by binary or non-UTF-8 bytes, given a wrong version, or made enormous (a
sparse 200 MB file). Every command must end with exit 0 (the damage does not matter to it) or exit 1 with
one line naming the damaged file; never a traceback or an "unexpected error", never a hang (the timeout
marker), and never read an enormous file into memory (the peak traced allocation stays far below it).
"""

from __future__ import annotations

import os
import random
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from tidemark.cli.main import main

FIXTURES = Path(__file__).parent.parent / "fixtures"
ENORMOUS = 200 * 1024**2


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _binary(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(4096))


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"v1\n\xff\xfe\xfa not utf-8 \xc3\x28\n")


def _wrong_version(path: Path) -> None:
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.splitlines() or [""]
    lines[0] = "v99"
    path.write_text("\n".join(lines))


def _enormous(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(ENORMOUS)  # sparse: costs no disk, but a reader that loads it would need 200 MB


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "empty": _empty,
    "binary": _binary,
    "non-utf8": _not_utf8,
    "wrong-version": _wrong_version,
    "enormous": _enormous,
}
CHECKPOINT_FILES = {
    "hdfs_dedup_window": ["offsets/2", "commits/2", "offsets/0", "metadata", "sources/0/0"],
    "rocksdb_window": ["offsets/2", "commits/2", "state/0/0/3.zip", "state/0/0/1.zip"],
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    tracemalloc.start()
    try:
        code = main(argv)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    captured = capsys.readouterr()
    # Bounded by the readers' own caps (a 16 MB progress-log line, a 64 MB log entry), not by the file.
    assert peak < ENORMOUS // 2, f"{argv} allocated {peak:,} bytes at peak"
    return code, captured.out + captured.err


def _check(code: int, output: str, damaged: str) -> None:
    assert code in (0, 1), output[-1500:]
    assert "Traceback" not in output and "unexpected error" not in output, output[-1500:]
    if code == 1:
        assert damaged in output.replace("\n", ""), output[-1500:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mutation", list(MUTATIONS))
@pytest.mark.parametrize(("case", "rel"), [(case, rel) for case, rels in CHECKPOINT_FILES.items() for rel in rels])
def test_checkpoint_commands_on_a_damaged_file(
    case: str, rel: str, mutation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / case
    shutil.copytree(FIXTURES / "spark35" / case, root)
    target = root / rel
    if not target.exists():
        pytest.fail(f"the fixture has no {rel}")
    MUTATIONS[mutation](target)
    for argv in (["checkpoint", "inspect", str(root)], ["checkpoint", "prune", str(root), "--keep", "1"]):
        code, output = _run(argv, capsys)
        _check(code, output, rel.rsplit("/", 1)[-1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_log_commands_on_a_damaged_progress_log(
    mutation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = sorted((FIXTURES / "progress").glob("*.jsonl"))
    assert logs, "no recorded progress log"
    log = tmp_path / logs[0].name
    shutil.copy(logs[0], log)
    MUTATIONS[mutation](log)
    for argv in (["analyze", str(log)], ["report", str(log), "-o", str(tmp_path / "r.html")]):
        code, output = _run(argv, capsys)
        _check(code, output, log.name)


@pytest.mark.timeout(120)
def test_a_progress_line_with_a_hostile_time_or_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = sorted((FIXTURES / "progress").glob("*.jsonl"))
    lines = logs[0].read_text().splitlines()
    hostile = [
        '{"type": "progress", "time": "not a time", "run_id": "r", "progress": {}}',
        '{"type": "progress", "time": 12, "run_id": "r", "progress": []}',
        '{"type": "progress", "run_id": "r", "progress": {"batchId": "x"}}',
        "[1, 2, 3]",
        '"just a string"',
        "{" * 10_000,
    ]
    log = tmp_path / "hostile.jsonl"
    log.write_text("\n".join([*lines[:3], *hostile, *lines[3:]]) + "\n")
    for argv in (["analyze", str(log)], ["report", str(log), "-o", str(tmp_path / "r.html")]):
        code, output = _run(argv, capsys)
        _check(code, output, log.name)


def test_fixture_sizes_stay_small() -> None:
    # The enormous mutation is sparse; make sure nothing made it into the recorded fixtures.
    for path in (FIXTURES / "spark35").rglob("*"):
        if path.is_file():
            assert os.path.getsize(path) < 5 * 1024**2
