"""inspect and prune on real checkpoints written by Spark: HDFS and RocksDB, changelog on/off, format v2."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from tests.streaming_queries import CASES, HDFS, ROCKSDB, run_query, windowed, write_input
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.doctor.prune import prune_checkpoint
from tidemark.formats import scan_checkpoint
from tidemark.session import runtime_conf
from tidemark.storage.local import LocalFS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def checkpoints(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One real checkpoint per case, built once for the module (2 input files: 2 batches)."""
    base = tmp_path_factory.mktemp("checkpoints")
    write_input(base / "in", range(2))
    made = {}
    for name, (build, conf) in CASES.items():
        run_query(spark, base / "in", build, base / name, base / f"{name}_out", conf)
        made[name] = base / name
    yield made


def _files(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


def _batches(folder: Path) -> list[int]:
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


@pytest.mark.parametrize("name", list(CASES))
def test_inspect_real_checkpoint(checkpoints: dict[str, Path], name: str) -> None:
    root = checkpoints[name]
    report = inspect_checkpoint(str(root), sink=str(root.parent / f"{name}_out"))
    files = _files(root)
    assert (report.files_total, report.bytes_total) == (len(files), sum(f.stat().st_size for f in files))
    assert report.latest_offset_batch == _batches(root / "offsets")[-1]
    assert report.latest_committed_batch == _batches(root / "commits")[-1] == report.latest_offset_batch
    assert report.query_id == json.loads((root / "metadata").read_text())["id"]
    assert report.findings == []
    assert report.sink is not None and report.sink.entries == len(_batches(root.parent / f"{name}_out/_spark_metadata"))
    for op in report.operators:
        versions_on_disk = {
            int(f.name.split(".")[0].split("_")[0])
            for f in _files(root / "state" / str(op.id))
            if f.name.endswith((".delta", ".zip", ".changelog", ".snapshot"))
        }
        assert op.versions_held == len(versions_on_disk)
        assert op.latest_version == report.latest_committed_batch + 1  # type: ignore[operator]
        assert op.partitions == 2


def test_operator_details(checkpoints: dict[str, Path]) -> None:
    hdfs = inspect_checkpoint(str(checkpoints["hdfs_dedup_window"]))
    assert {op.name for op in hdfs.operators} == {"dedupe", "stateStoreSave"}
    assert all(op.files_by_kind["delta"].files > 0 and op.files_by_kind["zip"].files == 0 for op in hdfs.operators)
    join_report = inspect_checkpoint(str(checkpoints["rocksdb_changelog_join"]))
    (op,) = join_report.operators
    assert op.name == "symmetricHashJoin" and len(op.store_names) == 4
    assert op.files_by_kind["changelog"].files > 0
    assert {s.store for s in op.stores} == set(op.store_names)
    sessions_report = inspect_checkpoint(str(checkpoints["rocksdb_sessions"]))
    kinds = sessions_report.operators[0].files_by_kind
    assert kinds["zip"].files > 0 and kinds["sst"].files > 0
    assert all(s.replay_on_load == 0 for s in sessions_report.operators[0].stores)  # a zip per version
    v2 = inspect_checkpoint(str(checkpoints["rocksdb_v2_window"]))
    assert v2.checkpoint_format_version == 2 and v2.state_provider == "RocksDBStateStoreProvider"


def test_hadoop_backend_agrees_with_native_walk(spark: SparkSession, checkpoints: dict[str, Path]) -> None:
    root = checkpoints["rocksdb_v2_window"]
    native = inspect_checkpoint(str(root))
    hadoop = inspect_checkpoint(f"file://{root}", backend="hadoop", spark=spark)
    assert (hadoop.files_total, hadoop.bytes_total) == (native.files_total, native.bytes_total)
    assert hadoop.operators == native.operators and hadoop.findings == native.findings
    dry = prune_checkpoint(f"file://{root}", keep=1, backend="hadoop", spark=spark)
    assert dry.paths == prune_checkpoint(str(root), keep=1).paths


def _copy(root: Path, target: Path) -> Path:
    shutil.copytree(root, target)
    return target


def test_findings_on_edited_copies(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    root = checkpoints["hdfs_dedup_window"]
    last = _batches(root / "commits")[-1]

    stuck = _copy(root, tmp_path / "stuck")
    shutil.rmtree(stuck / "commits")
    assert inspect_checkpoint(str(stuck)).findings[0].code == "NO_COMMITTED_BATCH"

    uncommitted = _copy(root, tmp_path / "uncommitted")
    (uncommitted / "commits" / str(last)).unlink()
    codes = {f.code for f in inspect_checkpoint(str(uncommitted)).findings}
    assert "UNCOMMITTED_BATCH" in codes

    orphan = _copy(root, tmp_path / "orphan")
    shutil.copy(orphan / "state/1/0" / f"{last + 1}.delta", orphan / "state/1/0" / f"{last + 5}.delta")
    assert [f.code for f in inspect_checkpoint(str(orphan)).findings] == ["ORPHAN_FILES"]

    missing = _copy(root, tmp_path / "missing")
    (missing / "state/0/1" / f"{last}.delta").unlink()
    report = inspect_checkpoint(str(missing))
    assert [f.code for f in report.findings] == ["STATE_VERSION_MISSING"] and report.has_errors


def _read_output(folder: Path) -> pd.DataFrame:
    parts = sorted(folder.glob("part-*.parquet"))
    frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    frame["start"] = pd.to_datetime(frame["start"], utc=True)
    return frame.sort_values(["start", "k"]).reset_index(drop=True)


def _expected(source: Path) -> pd.DataFrame:
    rows = [json.loads(line) for f in sorted(source.glob("*.json")) for line in f.read_text().splitlines()]
    events = pd.DataFrame(rows)
    events["ts"] = pd.to_datetime(events["ts"], utc=True)
    watermark = events["ts"].max() - pd.Timedelta(minutes=1)
    events["start"] = events["ts"].dt.floor("1min")
    sums = events.groupby(["start", "k"], as_index=False)["v"].sum().rename(columns={"v": "s"})
    closed = sums[sums["start"] + pd.Timedelta(minutes=1) <= watermark]
    return closed.sort_values(["start", "k"]).reset_index(drop=True)


def _assert_both_match_oracle(source: Path, *roots: Path) -> None:
    """Each root's `out` (the unpruned and the pruned copy after the same restart) equals the pandas oracle."""
    expected = _expected(source)
    for folder in roots:
        got = _read_output(folder / "out")
        assert len(got) == len(expected)
        assert got["k"].tolist() == expected["k"].tolist()
        assert got["s"].astype("int64").tolist() == expected["s"].astype("int64").tolist()
        assert (got["start"] == expected["start"]).all()


@pytest.mark.parametrize(
    "conf", [(ROCKSDB, "false", "1", "true"), (HDFS, "false", "1", "true")], ids=["rocksdb", "hdfs"]
)
def test_prune_then_restart_gives_the_same_output(
    spark: SparkSession, tmp_path: Path, conf: tuple[str, str, str, str]
) -> None:
    source = tmp_path / "in"
    write_input(source, range(3))
    plain, pruned = tmp_path / "plain", tmp_path / "pruned"
    run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
    shutil.copytree(plain, pruned)
    result = prune_checkpoint(str(pruned / "ck"), keep=2, apply=True)
    assert result.files > 0 and "offsets" in {f.folder for f in result.by_folder}
    if conf[0] == ROCKSDB:
        assert result.by_kind["zip"].files > 0  # a zip per version: old ones go
    assert inspect_checkpoint(str(pruned / "ck")).findings == []

    write_input(source, range(3, 5))
    run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
    run_query(spark, source, windowed, pruned / "ck", pruned / "out", conf)
    _assert_both_match_oracle(source, plain, pruned)


def _in_order(source: Path) -> None:
    """Distinct modification times in minute order: the file source takes files oldest first, one a batch."""
    for index, path in enumerate(sorted(source.glob("m*.json"))):
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))


def _wait_for_snapshots(checkpoint: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        scan = scan_checkpoint(LocalFS(str(checkpoint)))
        newest = max(scan.commit_batches) + 1
        stores = [store for op in scan.operators.values() for store in op.stores.values()]
        if stores and all(store.newest_snapshot(at_most=newest) is not None for store in stores):
            return
        assert time.monotonic() < deadline, f"no RocksDB snapshot in some store of {checkpoint} after {timeout}s"
        time.sleep(0.5)


@pytest.mark.parametrize("version", ["1", "2"], ids=["changelog", "changelog-v2"])
def test_prune_on_tidemarks_defaults_keeps_the_changelog_chain(
    spark: SparkSession, tmp_path: Path, version: str
) -> None:
    """Issue 15.4: RocksDB + changelog (tidemark's default), checkpoint format v1 and v2, a snapshot every
    2 versions: prune keeps, per store, a snapshot plus every changelog after it, and a restart matches."""
    conf = (ROCKSDB, "true", version, "true")
    source = tmp_path / "in"
    write_input(source, range(6))
    _in_order(source)
    plain, pruned = tmp_path / "plain", tmp_path / "pruned"
    with runtime_conf(spark, {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}):
        run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
    # RocksDB uploads snapshots from the background maintenance task (every 2 s in this suite), so one can land
    # after the query stopped: wait until every store has one, else the copy below may catch a store without.
    _wait_for_snapshots(plain / "ck")
    # Not Hadoop's temporary files of an upload still in flight (a later maintenance run): they vanish mid-copy.
    shutil.copytree(plain, pruned, ignore=shutil.ignore_patterns("*.tmp", "*.tmp.crc"))
    result = prune_checkpoint(str(pruned / "ck"), keep=2, apply=True)
    assert result.by_kind["changelog"].files > 0  # changelogs before the kept snapshot go
    after = scan_checkpoint(LocalFS(str(pruned / "ck")))
    newest = max(after.commit_batches) + 1
    for op in after.operators.values():
        for store in op.stores.values():
            base = store.newest_snapshot(at_most=newest)
            assert base is not None, "every store keeps a snapshot"
            assert store.can_load(newest) and store.can_load(newest - 1)
    assert inspect_checkpoint(str(pruned / "ck")).findings == []

    write_input(source, range(6, 8))
    _in_order(source)
    with runtime_conf(spark, {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}):
        run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
        run_query(spark, source, windowed, pruned / "ck", pruned / "out", conf)
    _assert_both_match_oracle(source, plain, pruned)


# A file source and a file sink whose compacted logs Spark was told to keep whole (as after a long stop, or the
# seed incident's grown checkpoint: Spark deletes the entries before a compaction one request at a time, inside
# the next batch).
_KEPT_LOGS = {
    "spark.sql.streaming.fileSink.log.compactInterval": "3",
    "spark.sql.streaming.fileSink.log.deletion": "false",
    "spark.sql.streaming.fileSource.log.compactInterval": "3",
    "spark.sql.streaming.fileSource.log.deletion": "false",
}


def _log_ids(folder: Path) -> dict[str, int]:
    return {n: int(n.split(".")[0]) for n in os.listdir(folder) if n.split(".")[0].isdigit()}


def test_prune_with_sink_takes_the_compacted_logs_entries_and_restart_matches(
    spark: SparkSession, tmp_path: Path
) -> None:
    conf = (HDFS, "false", "1", "true")
    source = tmp_path / "in"
    write_input(source, range(7))
    _in_order(source)
    plain, pruned = tmp_path / "plain", tmp_path / "pruned"
    with runtime_conf(spark, _KEPT_LOGS):
        run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
    shutil.copytree(plain, pruned)
    sink_log, source_log = pruned / "out/_spark_metadata", pruned / "ck/sources/0"
    before = {folder: _log_ids(folder) for folder in (sink_log, source_log)}

    dry = prune_checkpoint(str(pruned / "ck"), keep=2, sink=str(pruned / "out"))
    assert {folder: _log_ids(folder) for folder in (sink_log, source_log)} == before  # a dry run removes nothing
    result = prune_checkpoint(str(pruned / "ck"), keep=2, apply=True, sink=str(pruned / "out"))
    assert result.sink_paths == dry.sink_paths
    for folder in (sink_log, source_log):
        # What stays: the newest compaction at or below the oldest kept batch, and every entry after it.
        compactions = [b for n, b in before[folder].items() if n.endswith(".compact") and b <= result.keep_from_batch]
        assert compactions, f"{folder} has a compaction the kept batches read"
        expected_gone = {n for n, b in before[folder].items() if b < max(compactions)}
        assert expected_gone, f"{folder} had entries before that compaction"
        assert set(before[folder]) - set(_log_ids(folder)) == expected_gone
    assert {f"_spark_metadata/{n}" for n in before[sink_log]} - {
        f"_spark_metadata/{n}" for n in _log_ids(sink_log)
    } == {p for p in result.sink_paths if not p.endswith(".crc")}
    for folder in (sink_log, source_log):  # no checksum file outlives its entry
        names = set(os.listdir(folder))
        assert all(n[1:].removesuffix(".crc") in names for n in names if n.endswith(".crc")), sorted(names)
    assert inspect_checkpoint(str(pruned / "ck"), sink=str(pruned / "out")).findings == []

    write_input(source, range(7, 9))
    _in_order(source)
    with runtime_conf(spark, _KEPT_LOGS):
        run_query(spark, source, windowed, plain / "ck", plain / "out", conf)
        run_query(spark, source, windowed, pruned / "ck", pruned / "out", conf)
    _assert_both_match_oracle(source, plain, pruned)


def test_prune_with_a_sink_that_has_no_log_is_one_line(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    from tidemark.errors import UsageError

    (tmp_path / "not-a-sink").mkdir()
    with pytest.raises(UsageError, match="has no _spark_metadata log"):
        prune_checkpoint(str(checkpoints["hdfs_dedup_window"]), keep=1, sink=str(tmp_path / "not-a-sink"))
