"""prune on synthetic checkpoints: what goes, what stays, and the refusals."""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures.checkpoint import synthetic
from tidemark.compat import UTC
from tidemark.doctor.prune import prune_checkpoint
from tidemark.errors import CheckpointError, CheckpointLocked, UsageError
from tidemark.formats import LOCK_FILE


def _tree(root: Path) -> set[str]:
    return {str((Path(d) / f).relative_to(root)) for d, _, names in os.walk(root) for f in names}


def test_dry_run_removes_nothing(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=10)
    before = _tree(root)
    result = prune_checkpoint(str(root), keep=3)
    assert not result.applied and result.files > 0
    assert _tree(root) == before


def test_hdfs_keeps_chain_from_snapshot(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=10)
    synthetic.state_files(root, 0, 0, [4, 7], kind="snapshot")
    before = _tree(root)
    result = prune_checkpoint(str(root), keep=3, apply=True)
    after = _tree(root)
    # keep batches 7..9: state versions 8..10 must load; partition 0 starts from snapshot 7, partition 1 from nothing.
    assert result.keep_from_batch == 7
    removed = before - after
    assert set(result.paths) == removed
    assert {p for p in removed if p.startswith("offsets/") and "crc" not in p} == {f"offsets/{b}" for b in range(7)}
    assert {p for p in removed if p.startswith("commits/") and "crc" not in p} == {f"commits/{b}" for b in range(7)}
    state_removed = {p for p in removed if p.startswith("state/") and "crc" not in p}
    assert state_removed == {f"state/0/0/{v}.delta" for v in range(1, 7)} | {"state/0/0/4.snapshot"}
    # every checksum of a removed file went with it, no other
    for name in ("state/0/0/1.delta", "offsets/0"):
        folder, base = name.rsplit("/", 1)
        assert {f"{folder}/.{base}.crc", f"{folder}/{base}.crc", f"{folder}/.{base}.crc.crc"} <= removed
    assert "state/0/0/7.delta" in after and "state/0/0/.7.delta.crc" in after
    assert all(f"state/0/1/{v}.delta" in after for v in range(1, 11))
    assert "metadata" in after and "state/0/_metadata/metadata" in after


def test_keeps_offsets_before_latest(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=6)
    result = prune_checkpoint(str(root), keep=1, apply=True)
    # Spark reads offsets of the latest batch and the one before it on restart.
    assert result.keep_from_batch == 4
    assert (root / "offsets/4").exists() and (root / "commits/4").exists()


def test_orphan_versions_beyond_planned_batches_go(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    synthetic.offsets(root, [5])  # planned, not committed: may have written version 6
    synthetic.state_files(root, 0, 0, [6, 9])
    _crashed_long_ago(root / "offsets" / "5")
    result = prune_checkpoint(str(root), keep=5, apply=True)
    assert "state/0/0/9.delta" in result.paths
    assert (root / "state/0/0/6.delta").exists()


def test_rocksdb_unused_ssts_go(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, range(4))
    synthetic.commits(root, range(4))
    synthetic.rocksdb_zip(root, 0, 0, 1, ["000001-a.sst"])
    synthetic.rocksdb_zip(root, 0, 0, 2, ["000001-a.sst", "000002-b.sst"])
    synthetic.rocksdb_zip(root, 0, 0, 3, ["000002-b.sst", "000003-c.sst"])
    synthetic.rocksdb_zip(root, 0, 0, 4, ["000003-c.sst", "000004-d.sst"])
    result = prune_checkpoint(str(root), keep=2, apply=True)
    assert result.keep_from_batch == 2
    assert sorted(os.listdir(root / "state/0/0/SSTs")) == [
        ".000002-b.sst.crc",
        ".000003-c.sst.crc",
        ".000004-d.sst.crc",
        "000002-b.sst",
        "000003-c.sst",
        "000004-d.sst",
    ]
    assert not (root / "state/0/0/2.zip").exists() and (root / "state/0/0/3.zip").exists()


def test_rocksdb_changelog_keeps_snapshot_and_chain(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, range(12))
    synthetic.commits(root, range(12))
    synthetic.state_files(root, 0, 0, range(1, 13), kind="changelog")
    synthetic.rocksdb_zip(root, 0, 0, 5, ["000001-a.sst"])
    prune_checkpoint(str(root), keep=4, apply=True)  # versions 9..12 needed: base snapshot 5
    left = sorted(int(n.split(".")[0]) for n in os.listdir(root / "state/0/0") if n.endswith(".changelog"))
    assert left == list(range(5, 13))
    assert (root / "state/0/0/5.zip").exists() and (root / "state/0/0/SSTs/000001-a.sst").exists()


def _v2_tree(root: Path, snapshot_id: str) -> Path:
    synthetic.query(root)
    synthetic.offsets(root, range(6))
    ids = {b: {0: [[f"u{b + 1}"]]} for b in range(6)}
    synthetic.commits(root, range(6), unique_ids=ids)
    for v in range(1, 7):
        synthetic.state_files(root, 0, 0, [v], kind="changelog", unique_id=f"u{v}")
    synthetic.state_files(root, 0, 0, [3], kind="zip", unique_id=snapshot_id)
    return root


def test_format_v2_snapshot_of_other_attempt_is_not_a_base(tmp_path: Path) -> None:
    other = _v2_tree(tmp_path / "other", "other-attempt")
    prune_checkpoint(str(other), keep=2, apply=True)
    assert (other / "state/0/0/1_u1.changelog").exists()  # no valid snapshot: the whole chain stays
    committed = _v2_tree(tmp_path / "committed", "u3")
    prune_checkpoint(str(committed), keep=2, apply=True)  # versions 5, 6 needed: snapshot 3 + changelogs 4..6
    assert not (committed / "state/0/0/1_u1.changelog").exists()
    assert not (committed / "state/0/0/2_u2.changelog").exists()
    assert (committed / "state/0/0/3_u3.zip").exists() and (committed / "state/0/0/4_u4.changelog").exists()


def test_refuses_a_live_lock(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    now = datetime.now(tz=UTC).isoformat()
    lock = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "run_id": "r1",
        "started": now,
        "heartbeat": now,
        "heartbeat_seconds": 10,
    }
    (root / "_tidemark").mkdir()
    (root / LOCK_FILE).write_text(json.dumps(lock))
    with pytest.raises(CheckpointLocked, match=r"pid \d+"):
        prune_checkpoint(str(root), keep=1, apply=True)
    lock["heartbeat"] = "2020-01-01T00:00:00+00:00"
    (root / LOCK_FILE).write_text(json.dumps(lock))
    assert prune_checkpoint(str(root), keep=1).files > 0  # stale lock: allowed
    assert (root / LOCK_FILE).exists()


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        prune_checkpoint(str(tmp_path / "missing"), keep=1)
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, [0])
    with pytest.raises(CheckpointError, match="batch 0 was planned 0 s ago and has not committed"):
        prune_checkpoint(str(root), keep=1)
    _crashed_long_ago(root / "offsets" / "0")
    with pytest.raises(CheckpointError, match="no committed batch"):
        prune_checkpoint(str(root), keep=1)
    with pytest.raises(UsageError):
        prune_checkpoint(str(root), keep=0)


def test_never_follows_a_symlink_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "1.delta").write_text("precious")
    root = synthetic.simple(tmp_path / "ck", batches=6)
    synthetic.state_files(root, 0, 0, [3], kind="snapshot")
    os.symlink(outside, root / "state/0/7")
    prune_checkpoint(str(root), keep=1, apply=True)
    assert (outside / "1.delta").read_text() == "precious"


def _crashed_long_ago(offset_file: Path) -> None:
    """The query that planned this batch stopped an hour ago (a crash): no query is mid-batch any more."""
    old = time.time() - 3600
    os.utime(offset_file, (old, old))


def test_a_query_mid_batch_without_tidemarks_lock_is_refused_and_nothing_goes(tmp_path: Path) -> None:
    """A plain Spark job running on the checkpoint holds no tidemark lock; its fresh uncommitted batch shows it."""
    root = synthetic.simple(tmp_path / "ck", batches=6)
    synthetic.offsets(root, [6])
    before = sorted(p for p in root.rglob("*"))
    with pytest.raises(CheckpointLocked, match=r"batch 6 was planned .* ago and has not committed"):
        prune_checkpoint(str(root), keep=1, apply=True)
    assert sorted(p for p in root.rglob("*")) == before
    _crashed_long_ago(root / "offsets" / "6")
    assert prune_checkpoint(str(root), keep=1, apply=True).files > 0
