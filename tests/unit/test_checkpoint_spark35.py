"""inspect and prune on real checkpoints written by Spark 3.5.7 (recorded by tests/fixtures/spark35/record.py).

The suite's pyspark is 4.1, so these checkpoints are kept as files; the expected numbers come from walking the
recorded folders here, not from tidemark.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.doctor.prune import prune_checkpoint

RECORDED = Path(__file__).parents[1] / "fixtures" / "spark35"
CASES = {
    # name: (provider, operators, store names of operator 0)
    "hdfs_dedup_window": ("HDFSBackedStateStoreProvider", 2, ["default"]),
    "hdfs_window": ("HDFSBackedStateStoreProvider", 1, ["default"]),
    "rocksdb_window": ("RocksDBStateStoreProvider", 1, ["default"]),
    "rocksdb_sessions": ("RocksDBStateStoreProvider", 1, ["default"]),
    "rocksdb_changelog_join": (
        "RocksDBStateStoreProvider",
        1,
        ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"],
    ),
}
STATE_SUFFIXES = (".delta", ".snapshot", ".zip", ".changelog")


def _copy(name: str, tmp_path: Path) -> tuple[Path, Path]:
    root = shutil.copytree(RECORDED / name, tmp_path / name)
    sink = shutil.copytree(RECORDED / f"{name}_out", tmp_path / f"{name}_out")
    return root, sink


def _files(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


def _batches(folder: Path) -> list[int]:
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def _state_versions(folder: Path) -> set[int]:
    return {int(f.name.split(".")[0]) for f in _files(folder) if f.name.endswith(STATE_SUFFIXES)}


def _sst_references(zipped: Path) -> set[str]:
    """The SST files a RocksDB snapshot zip lists in its metadata (line 1 is the version)."""
    with zipfile.ZipFile(zipped) as archive:
        meta = json.loads(archive.read("metadata").decode().splitlines()[1])
    return {f["dfsSstFileName"] for f in meta["sstFiles"]}


def test_the_recording_is_spark_35() -> None:
    assert (RECORDED / "SPARK_VERSION").read_text().startswith("3.5.")


@pytest.mark.parametrize("name", list(CASES))
def test_inspect_spark35_checkpoint(name: str, tmp_path: Path) -> None:
    provider, operators, stores = CASES[name]
    root, sink = _copy(name, tmp_path)
    report = inspect_checkpoint(str(root), sink=str(sink))

    files = _files(root)
    assert (report.files_total, report.bytes_total) == (len(files), sum(f.stat().st_size for f in files))
    assert report.query_id == json.loads((root / "metadata").read_text())["id"]
    assert report.latest_offset_batch == _batches(root / "offsets")[-1] == 2
    assert report.latest_committed_batch == _batches(root / "commits")[-1] == 2
    assert report.state_provider == provider and report.checkpoint_format_version == 1
    assert report.findings == []
    assert report.sink is not None and report.sink.entries == len(_batches(sink / "_spark_metadata")) == 3
    assert len(report.operators) == operators
    assert report.operators[0].store_names == stores
    for op in report.operators:
        assert op.name is None  # Spark 3.5 writes no operator metadata
        assert op.partitions == len([p for p in (root / "state" / str(op.id)).iterdir() if p.name.isdigit()]) == 2
        assert op.versions_held == len(_state_versions(root / "state" / str(op.id)))
        assert op.latest_version == 3
        state_files = _files(root / "state" / str(op.id))
        assert op.files == len(state_files)
        assert sum(c.files for c in op.files_by_kind.values()) == op.files


def test_spark35_file_kinds(tmp_path: Path) -> None:
    hdfs = inspect_checkpoint(str(_copy("hdfs_window", tmp_path)[0])).operators[0]
    # No snapshot yet: a load replays every delta (3 versions) on each of the 2 partitions.
    assert hdfs.files_by_kind["delta"].files == 6 and hdfs.max_replay_on_load == 3
    rocks = inspect_checkpoint(str(_copy("rocksdb_window", tmp_path)[0])).operators[0]
    assert rocks.files_by_kind["zip"].files == 6 and rocks.files_by_kind["sst"].files > 0
    assert rocks.max_replay_on_load == 0
    join = inspect_checkpoint(str(_copy("rocksdb_changelog_join", tmp_path)[0])).operators[0]
    assert join.files_by_kind["changelog"].files == 2 * 4 * 3  # partitions x stores x versions
    assert join.files_by_kind["zip"].files == 0


@pytest.mark.parametrize("name", list(CASES))
def test_prune_spark35_checkpoint_keeps_what_a_restart_needs(name: str, tmp_path: Path) -> None:
    root, _ = _copy(name, tmp_path)
    before = {str(p.relative_to(root)) for p in _files(root)}
    dry = prune_checkpoint(str(root), keep=1)
    assert {str(p.relative_to(root)) for p in _files(root)} == before  # a dry run removes nothing
    assert set(dry.paths) <= before

    done = prune_checkpoint(str(root), keep=1, apply=True)
    after = {str(p.relative_to(root)) for p in _files(root)}
    assert done.paths == dry.paths
    assert after == before - set(done.paths)
    # Spark reads the latest batch's offsets and the one before it on restart: batch 1 is the oldest kept.
    assert done.keep_from_batch == 1
    assert {"offsets/1", "offsets/2", "commits/1", "commits/2", "metadata"} <= after
    assert not any(p.startswith(("offsets/0", "commits/0")) for p in after)
    report = inspect_checkpoint(str(root))
    assert report.findings == [] and report.latest_committed_batch == 2
    for op in report.operators:
        assert 3 in _state_versions(root / "state" / str(op.id))
        if op.files_by_kind["zip"].files:  # RocksDB without changelog: a zip per version; version 1 goes
            assert _state_versions(root / "state" / str(op.id)) == {2, 3}
            for zipped in (root / "state" / str(op.id)).glob("*/*.zip"):
                assert _sst_references(zipped) <= {p.name for p in zipped.parent.glob("SSTs/*")}
        else:  # no snapshot yet: the whole delta/changelog chain stays
            assert _state_versions(root / "state" / str(op.id)) == {1, 2, 3}


def test_text_report_shows_each_operator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark.cli.main import main

    odd = tmp_path / "[red]jobs"  # rich markup in a path is printed as it is
    odd.mkdir()
    root, _ = _copy("hdfs_dedup_window", odd)
    assert main(["checkpoint", "inspect", str(root)]) == 0
    text = capsys.readouterr().out
    assert f"checkpoint {root}" in text
    for op in (0, 1):
        deltas = len([f for f in _files(root / "state" / str(op)) if f.name.endswith(".delta")])
        files = len(_files(root / "state" / str(op)))
        assert f"  {op} (no operator metadata): 2 partitions, stores default" in text
        assert f"versions 3 (1..3), {files} files" in text
        assert f"by kind: delta {deltas}, crc" in text
    assert json.dumps(json.loads((root / "offsets/2").read_text().splitlines()[2])) in text
