"""inspect on synthetic checkpoints: counts against the files the test wrote, and one case per finding."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.fixtures.checkpoint import synthetic
from tidemark.doctor.findings import Thresholds
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.findings import Severity


def _codes(path: Path, **kwargs: object) -> dict[str, Severity]:
    report = inspect_checkpoint(str(path), **kwargs)  # type: ignore[arg-type]
    return {f.code: f.severity for f in report.findings}


def _walk_counts(root: Path) -> tuple[int, int]:
    files = [Path(d) / f for d, _, names in os.walk(root) for f in names if "_tidemark" not in d]
    return len(files), sum(f.stat().st_size for f in files)


def test_healthy_counts_match_the_tree(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    (root / "_tidemark").mkdir()
    (root / "_tidemark" / "run.lock").write_text("{}")
    report = inspect_checkpoint(str(root))
    assert (report.files_total, report.bytes_total) == _walk_counts(root)
    assert report.query_id == synthetic.QUERY_ID
    assert (report.latest_offset_batch, report.latest_committed_batch) == (4, 4)
    assert report.source_offsets == [{"logOffset": 4}]
    assert report.latest_offset_watermark is not None
    assert report.latest_offset_watermark.timestamp() == (1_704_067_200_000 + 4000) / 1000
    op = report.operators[0]
    assert (op.id, op.name, op.partitions, op.store_names) == (0, "stateStoreSave", 2, ["default"])
    assert op.files_by_kind["delta"].files == 10
    assert op.files_by_kind["delta"].bytes == 1000
    assert op.files_by_kind["crc"].files == 10 * 3 + 2 * 3 + 3  # per delta, per schema, the op metadata
    assert op.versions_held == 5
    assert op.max_replay_on_load == 5
    assert report.findings == []


def test_replay_counts_from_newest_snapshot(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=30)
    synthetic.state_files(root, 0, 1, [10, 20], kind="snapshot")
    report = inspect_checkpoint(str(root), thresholds=Thresholds(max_replay=15))
    stores = {s.partition: s for s in report.operators[0].stores}
    assert (stores[0].newest_snapshot, stores[0].replay_on_load) == (None, 30)
    assert (stores[1].newest_snapshot, stores[1].replay_on_load) == (20, 10)
    finding = next(f for f in report.findings if f.code == "LONG_REPLAY_CHAIN")
    assert "30" in finding.message and "partition 0" in finding.message


def test_no_committed_batch_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, [0])
    report = inspect_checkpoint(str(root))
    assert [f.code for f in report.findings] == ["NO_COMMITTED_BATCH"]
    assert report.has_errors
    # A stop during batch 0 leaves this too, and a plain restart works: that comes first, deleting is never advised.
    fix = report.findings[0].fix
    assert fix.startswith("restart the query first") and "delete" not in fix.lower(), fix


def test_uncommitted_batch(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    synthetic.offsets(root, [5])
    assert _codes(root) == {"UNCOMMITTED_BATCH": Severity.WARNING}
    synthetic.offsets(root, [6, 7])
    assert _codes(root) == {"UNCOMMITTED_BATCH": Severity.ERROR}


def test_too_many_files_names_folders(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    report = inspect_checkpoint(str(root), thresholds=Thresholds(max_files=20))
    finding = next(f for f in report.findings if f.code == "TOO_MANY_FILES")
    assert "state/0 " in finding.message and "offsets 20" in finding.message


def test_retention_too_high(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=12)
    assert _codes(root, thresholds=Thresholds(max_history=10)) == {"RETENTION_TOO_HIGH": Severity.WARNING}


def test_orphan_versions_after_last_commit(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    synthetic.state_files(root, 0, 1, [7, 8])  # versions 7, 8: no batch wrote them
    report = inspect_checkpoint(str(root))
    finding = next(f for f in report.findings if f.code == "ORPHAN_FILES")
    assert "2 state file(s)" in finding.message and "partition 1" in finding.message


def test_orphan_unique_ids_in_format_v2(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, range(3))
    ids = {b: {0: [[f"p0v{b + 1}"]]} for b in range(3)}
    synthetic.commits(root, range(3), unique_ids=ids)
    for v in (1, 2, 3):
        synthetic.state_files(root, 0, 0, [v], kind="changelog", unique_id=f"p0v{v}")
    synthetic.state_files(root, 0, 0, [2], kind="changelog", unique_id="retried-attempt")
    report = inspect_checkpoint(str(root))
    assert report.checkpoint_format_version == 2
    assert [f.code for f in report.findings] == ["ORPHAN_FILES"]
    assert "1 state file(s)" in report.findings[0].message


def test_missing_state_version_is_an_error(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    os.remove(root / "state/0/1/3.delta")
    report = inspect_checkpoint(str(root))
    assert [f.code for f in report.findings] == ["STATE_VERSION_MISSING"]
    assert "partition 1" in report.findings[0].message
    shutil.rmtree(root / "state/0/1")
    assert "state/0/1 is gone" in inspect_checkpoint(str(root)).findings[0].message


def test_snapshot_covers_missing_old_deltas(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    synthetic.state_files(root, 0, 0, [3], kind="snapshot")
    os.remove(root / "state/0/0/2.delta")
    assert _codes(root) == {}


def test_sink_metadata_growth(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=5)
    output = tmp_path / "out"
    synthetic.sink_log(output, batches=25, files_per_batch=3)
    report = inspect_checkpoint(str(root), sink=str(output), thresholds=Thresholds(max_sink_files=50))
    assert report.sink is not None
    assert (report.sink.entries, report.sink.latest_batch, report.sink.latest_compact_batch) == (25, 24, 19)
    assert report.sink.files_in_compact == 60  # batches 0..19, 3 files each
    assert report.sink.compact_bytes == (output / "_spark_metadata" / "19.compact").stat().st_size
    assert [f.code for f in report.findings] == ["SINK_METADATA_GROWTH"]


def test_join_named_stores(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    synthetic.query(root)
    synthetic.offsets(root, range(3))
    synthetic.commits(root, range(3))
    stores = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    synthetic.operator(root, 0, "symmetricHashJoin", stores, 2)
    for p in range(2):
        for s in stores:
            synthetic.state_files(root, 0, p, range(1, 4), store=s)
    report = inspect_checkpoint(str(root))
    op = report.operators[0]
    assert op.store_names == stores
    assert len(op.stores) == 8
    assert op.files_by_kind["delta"].files == 24
    assert report.findings == []
