"""Damaged, missing and misplaced checkpoint files are findings: the file, what it breaks, the way out, exit 1.

Each corruption of issue 25 is applied to a real checkpoint Spark 3.5.7 wrote (tests/fixtures/spark35), once with
the HDFS-backed provider and once with RocksDB. Both hold batches 0..2, all committed, with state versions 1..3 on
2 partitions, so by hand: a restart reads offsets/2, offsets/1, commits/2, `metadata`, the file source's log and
state version 3; the newest batch a rollback can restart from with everything intact is batch 1.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.checkpoint import synthetic
from tidemark.cli.main import main
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.findings import Severity

RECORDED = Path(__file__).parents[1] / "fixtures" / "spark35"
NEWEST_STATE = {"hdfs_window": "state/0/0/3.delta", "rocksdb_window": "state/0/0/3.zip"}


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(25).randbytes(300))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _unknown_version(path: Path) -> None:
    lines = path.read_text().split("\n")
    path.write_text("\n".join(["v99", *lines[1:]]))


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "part").write_text("x")


def _not_json(path: Path) -> None:
    path.write_text("this is not json")


# name -> (file to damage, damage, expected code); "<state>" is the provider's newest state file.
CORRUPTIONS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "offsets-truncated": ("offsets/2", _truncate, "CORRUPT_OFFSETS"),
    "offsets-garbage": ("offsets/2", _garbage, "CORRUPT_OFFSETS"),
    "offsets-empty": ("offsets/2", _empty, "CORRUPT_OFFSETS"),
    "offsets-unknown-version": ("offsets/2", _unknown_version, "UNKNOWN_LOG_VERSION"),
    "offsets-folder": ("offsets/2", _folder, "CORRUPT_OFFSETS"),
    "previous-offsets-garbage": ("offsets/1", _garbage, "CORRUPT_OFFSETS"),
    "commit-garbage": ("commits/2", _garbage, "CORRUPT_COMMIT"),
    "commit-empty": ("commits/2", _empty, "CORRUPT_COMMIT"),
    "commit-truncated": ("commits/2", _truncate, "CORRUPT_COMMIT"),
    "metadata-empty": ("metadata", _empty, "CORRUPT_METADATA"),
    "metadata-not-json": ("metadata", _not_json, "CORRUPT_METADATA"),
    "state-empty": ("<state>", _empty, "CORRUPT_STATE_FILE"),
    "state-garbage": ("<state>", _garbage, "CORRUPT_STATE_FILE"),
    "state-truncated": ("<state>", _truncate, "CORRUPT_STATE_FILE"),
    "source-log-garbage": ("sources/0/2", _garbage, "CORRUPT_SOURCE_LOG"),
}


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(RECORDED / name, tmp_path / name))


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("case", list(NEWEST_STATE))
def test_each_corruption_is_an_error_finding(
    case: str, corruption: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(case, tmp_path)
    rel, damage, code = CORRUPTIONS[corruption]
    rel = NEWEST_STATE[case] if rel == "<state>" else rel
    damage(root / rel)

    report = inspect_checkpoint(str(root))
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    assert [f.code for f in errors] == [code], report.findings
    finding = errors[0]
    assert finding.file is not None and rel in finding.file
    assert rel in finding.message
    assert finding.impact is not None and "cannot" in finding.impact
    if code == "CORRUPT_METADATA":
        assert '{"id":"' in finding.fix
    else:
        # Rolling back to 1 needs offsets/1 itself: with it damaged, batch 0 is the newest intact one.
        target = 0 if rel == "offsets/1" else 1
        assert f"--to-batch {target} " in finding.fix and f"restarts at batch {target + 1}" in finding.fix

    assert main(["checkpoint", "inspect", str(root), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)["findings"]
    assert printed[0]["code"] == code and printed[0]["file"] == finding.file


@pytest.mark.parametrize("case", list(NEWEST_STATE))
def test_a_removed_partition_folder_leaves_no_rollback(case: str, tmp_path: Path) -> None:
    root = _copy(case, tmp_path)
    shutil.rmtree(root / "state" / "0" / "1")
    report = inspect_checkpoint(str(root))
    # Spark 3.5 wrote no operator metadata: the partition count comes from the offsets' recorded conf.
    [finding] = [f for f in report.findings if f.severity is Severity.ERROR]
    assert finding.code == "STATE_VERSION_MISSING" and "state/0/1 is gone" in finding.message
    assert "--to-batch" not in finding.fix and "restore" in finding.fix


@pytest.mark.parametrize("case", list(NEWEST_STATE))
def test_the_manual_rollback_the_fix_describes_leaves_a_clean_checkpoint(case: str, tmp_path: Path) -> None:
    root = _copy(case, tmp_path)
    _empty(root / NEWEST_STATE[case])
    assert inspect_checkpoint(str(root)).has_errors
    # By hand, as the fix says: offsets/ and commits/ after 1, state versions after 2 (with .crc files).
    for folder in ("offsets", "commits"):
        for name in ("2", ".2.crc"):
            (root / folder / name).unlink()
    for path in list((root / "state").rglob("*")):
        if path.is_file() and path.name.lstrip(".").split(".")[0] == "3":
            path.unlink()
    report = inspect_checkpoint(str(root))
    assert report.findings == [] and report.latest_committed_batch == 1


def test_an_old_damaged_entry_is_a_warning(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    _garbage(root / "offsets" / "0")
    _garbage(root / "commits" / "0")
    report = inspect_checkpoint(str(root))
    assert not report.has_errors
    assert sorted(f.code for f in report.findings) == ["CORRUPT_COMMIT", "CORRUPT_OFFSETS"]
    assert all(f.impact and "a restart does not read it" in f.impact for f in report.findings)


def test_a_missing_pair_in_the_middle_is_a_gap(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=6)
    for folder in ("offsets", "commits"):
        for name in ("2", ".2.crc", "2.crc", ".2.crc.crc"):
            (root / folder / name).unlink()
    report = inspect_checkpoint(str(root))
    [gap] = report.findings
    assert (gap.code, gap.severity) == ("LOG_GAP", Severity.WARNING)
    assert "offsets/ has no entry for batch 2" in gap.message and "commits/ has no entry for batch 2" in gap.message
    assert gap.impact is not None and "a restart works" in gap.impact


def test_the_batch_before_the_newest_missing_stops_a_restart(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=6)
    (root / "offsets" / "4").unlink()
    report = inspect_checkpoint(str(root))
    gaps = [f for f in report.findings if f.code == "LOG_GAP"]
    assert len(gaps) == 1 and gaps[0].severity is Severity.ERROR
    assert "offsets/4" in (gaps[0].impact or "")


def test_commits_ahead_of_offsets(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=3)
    synthetic.commits(root, [3])
    codes = [f.code for f in inspect_checkpoint(str(root)).findings]
    assert "COMMIT_AHEAD_OF_OFFSETS" in codes


def _as_spark_21(root: Path) -> None:
    """Spark 2.0/2.1 wrote no commit log and no SQL conf in its offsets."""
    shutil.rmtree(root / "commits")
    for path in (root / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().split("\n")
            meta = json.loads(lines[1])
            meta.pop("conf")
            path.write_text("\n".join([lines[0], json.dumps(meta), *lines[2:]]))


def test_no_commit_log_is_not_stuck_at_batch_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy("hdfs_window", tmp_path)
    _as_spark_21(root)
    report = inspect_checkpoint(str(root))
    codes = [f.code for f in report.findings]
    assert codes == ["NO_COMMIT_LOG"], report.findings
    assert report.findings[0].severity is Severity.INFO
    assert "before 2.2" in report.findings[0].message and "batch 2" in (report.findings[0].impact or "")
    assert main(["checkpoint", "inspect", str(root)]) == 0
    assert "delete the checkpoint" not in capsys.readouterr().out


def test_no_commit_log_checks_the_state_the_rerun_loads(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    _as_spark_21(root)
    # Without a commit log the newest planned batch (2) runs again and loads state version 2, not 3.
    _empty(root / "state" / "0" / "1" / "2.delta")
    errors = [f for f in inspect_checkpoint(str(root)).findings if f.severity is Severity.ERROR]
    assert [f.code for f in errors] == ["CORRUPT_STATE_FILE"] and "2.delta" in errors[0].message


def test_an_empty_commits_folder_is_still_stuck_at_batch_0(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, [0])
    (root / "commits").mkdir()
    assert [f.code for f in inspect_checkpoint(str(root)).findings] == ["NO_COMMITTED_BATCH"]


def test_spark_20_java_serialized_offsets(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    for batch in ("0", "1", "2"):
        (root / "offsets" / batch).write_bytes(b"\xac\xed\x00\x05sr\x00\x3aorg.apache.spark.sql.execution.streaming")
    errors = [f for f in inspect_checkpoint(str(root)).findings if f.severity is Severity.ERROR]
    assert {f.code for f in errors} == {"SPARK_20_LOG"}
    assert all("Spark 2.0" in f.message and "new checkpoint" in f.fix for f in errors)


def test_offsets_formats_spark_reads(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    # An empty metadata line (no OffsetSeqMetadata) and a v2 entry of named sources (Spark 4.2+) both parse.
    (root / "offsets" / "1").write_text('v1\n\n{"logOffset":1}')
    (root / "offsets" / "2").write_text('v2\n{"batchWatermarkMs":5,"conf":{"a":"b"}}\nevents:{"logOffset":2}')
    report = inspect_checkpoint(str(root))
    assert report.findings == []
    assert report.source_offsets == [{"logOffset": 2}]


def test_a_missing_sst_of_the_newest_snapshot(tmp_path: Path) -> None:
    root = _copy("rocksdb_window", tmp_path)
    ssts = sorted((root / "state" / "0" / "1" / "SSTs").glob("*.sst"))
    for sst in ssts:
        os.remove(sst)
    errors = [f for f in inspect_checkpoint(str(root)).findings if f.severity is Severity.ERROR]
    assert errors and errors[0].code == "CORRUPT_STATE_FILE" and "SSTs" in errors[0].message


def test_a_removed_join_store_folder(tmp_path: Path) -> None:
    corpus = Path(__file__).parents[1] / "fixtures" / "corpus" / "spark-3.5.9" / "rocksdb_changelog_join"
    root = Path(shutil.copytree(corpus / "checkpoint", tmp_path / "join"))
    shutil.rmtree(root / "state" / "0" / "1" / "left-keyToNumValues")
    [finding] = [f for f in inspect_checkpoint(str(root)).findings if f.severity is Severity.ERROR]
    assert finding.code == "STATE_VERSION_MISSING"
    assert "partition 1 store left-keyToNumValues (its folder is gone)" in finding.message


def test_a_damaged_source_entry_is_moved_by_the_manual_fix(tmp_path: Path) -> None:
    root = _copy("hdfs_window", tmp_path)
    _garbage(root / "sources" / "0" / "2")
    [finding] = inspect_checkpoint(str(root)).findings
    assert "--to-batch 1 " in finding.fix and "sources/0/2" in finding.fix.split("by hand")[1]
