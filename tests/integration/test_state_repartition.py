"""`state repartition` proof: a window, a session and a transformWithState pipeline run on part of the data with
3 partitions, get repartitioned (to 8, and to 2 on the other state store), run on the rest with the new count,
and equal the pandas oracle; so do a window and a join (state format 3) in checkpoint format v2, which stays v2.
Spark's reader sees the same (key, value) rows before and after, and state-metadata reports the new count."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pandas as pd
import pytest

from tests.helpers import read_sink, write_config
from tests.integration.test_pipeline_kinds import session_oracle
from tests.oracles import assert_matches_oracle, window_oracle
from tests.streaming_queries import HDFS as HDFS_PROVIDER
from tests.streaming_queries import ROCKSDB as ROCKSDB_PROVIDER
from tests.streaming_queries import (
    assert_join_output_matches_pandas,
    dedup_then_window,
    join,
    run_query,
    windowed,
    write_input,
)
from tests.unit.test_state_corpus import CORPUS
from tidemark.cli.main import main
from tidemark.compat import UTC
from tidemark.config import TidemarkConfig, load_config
from tidemark.config.model import PROVIDER_KEY
from tidemark.context import PipelineContext
from tidemark.evolve.repartition import RepartitionReport, repartition_checkpoint
from tidemark.evolve.verify import compare_state
from tidemark.formats import JOIN_STORES, Checkpoint, read_progress_log
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline, start_query
from tidemark.recovery.audit import audit_sink
from tidemark.session import runtime_conf
from tidemark.sizing.store_start import plan_start
from tidemark.statestore.reader import open_state_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stateful"
HDFS = "hdfs"


def run_available(spark: SparkSession, config: TidemarkConfig) -> None:
    """Run the configured pipeline until the files present are processed."""
    with runtime_conf(spark, config.spark_conf()):
        query = start_query(spark, PipelineContext.of(config), available_now=True)
        query.awaitTermination(600)
        assert query.exception() is None


def arrive(files: list[Path], landing: Path, first_mtime: int) -> None:
    """Copy files into the landing folder, their modification times in this order (the file source's order)."""
    landing.mkdir(exist_ok=True)
    for index, file in enumerate(files):
        target = landing / file.name
        shutil.copy(file, target)
        os.utime(target, (first_mtime + index, first_mtime + index))


def batches_of(checkpoint: str) -> list[list[Path]]:
    """The files each batch read, from the file source's log (no-data batches as empty lists)."""
    handle = Checkpoint.open(checkpoint)
    files = handle.source_files_by_batch()
    return [[Path(urlparse(f).path) for f in files.get(b, [])] for b in range(handle.latest_committed_batch() + 1)]


def assert_verified(report: RepartitionReport, partitions: int, spark: SparkSession) -> None:
    """The rewrite read back with Spark's statestore reader equals the original, and state-metadata agrees."""
    assert report.applied and report.verification is not None
    assert report.verification.targets and report.verification.same
    assert all(t.rows_before == t.rows_after > 0 for t in report.verification.targets)
    assert sum(sum(s.rows_by_old_partition) for s in report.stores) > 0
    assert all(len(s.keys_by_new_partition) == partitions for s in report.stores)
    metadata = spark.read.format("state-metadata").load(report.new_checkpoint).collect()
    assert metadata and {int(r["numPartitions"]) for r in metadata} == {partitions}


def test_window_continues_with_8_partitions_after_repartition(spark: SparkSession, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "all", events=1200, keys=9, files=4, seed=5)
    arrive(list(data.files[:2]), tmp_path / "landing", 1_700_000_000)
    settings = {"shuffle_partitions": 3}
    store = {"state_store": HDFS}
    config = load_config(write_config(tmp_path, spark=settings, checkpoint=store))
    run_available(spark, config)

    assert main(["state", "repartition", config.checkpoint.location, "--partitions", "8"]) == 0  # dry run
    assert Checkpoint.open(config.checkpoint.location).offset(0).conf["spark.sql.shuffle.partitions"] == "3"
    report = repartition_checkpoint(config.checkpoint.location, 8, apply=True)
    assert_verified(report, 8, spark)
    assert report.archive is not None and Path(report.archive).is_dir()  # the old checkpoint, kept
    assert Checkpoint.open(report.archive).offset(0).conf["spark.sql.shuffle.partitions"] == "3"

    arrive(list(data.files[2:]), tmp_path / "landing", 1_700_000_100)
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 8}, checkpoint=store))
    run_available(spark, config)

    latest = Checkpoint.open(config.checkpoint.location).latest_committed_batch()
    assert Checkpoint.open(config.checkpoint.location).offset(latest).conf["spark.sql.shuffle.partitions"] == "8"
    expected = window_oracle(batches_of(config.checkpoint.location), timedelta(minutes=15), timedelta(minutes=10))
    assert len(expected) > 30
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    audit = audit_sink(config)  # issue 16.3: exactly once across the repartition, batch by batch
    assert audit.ok, audit.violations
    assert len(audit.batches) == Checkpoint.open(config.checkpoint.location).latest_committed_batch() + 1


def test_a_window_that_outgrew_the_hdfs_store_moves_to_rocksdb(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 29: the expected size outgrows the store a checkpoint was created with; the advice's command moves the
    state to RocksDB (same partitions), and `tidemark run` continues on it with a cap sized from that state."""
    data = generate_events(tmp_path / "all", events=1200, keys=9, files=4, seed=29)
    arrive(list(data.files[:2]), tmp_path / "landing", 1_700_000_000)
    config = load_config(write_config(tmp_path, checkpoint={"state_store": HDFS}))
    run_pipeline(config, available_now=True, spark=spark)

    grown = load_config(write_config(tmp_path, checkpoint={"expected_state_keys": 50_000_000}))
    [advice] = plan_start(grown).findings
    assert advice.code == "STATE_STORE_OUTGROWN"
    command = f"tidemark state repartition {config.checkpoint.location} --partitions 2 --state-store rocksdb --apply"
    assert command in advice.fix
    assert main(command.split()[1:]) == 0  # the advice, as the user runs it
    moved = Checkpoint.open(config.checkpoint.location)
    assert moved.offset(moved.latest_committed_batch()).conf[PROVIDER_KEY] == ROCKSDB_PROVIDER

    arrive(list(data.files[2:]), tmp_path / "landing", 1_700_000_100)
    result = run_pipeline(grown, available_now=True, spark=spark)
    started = next(e for e in read_progress_log(result.monitor_log or "") if e.type == "started")
    record = started.data["state_store"]
    assert record["state_store"] == "rocksdb" and record["chosen_by"] == "checkpoint"
    assert record["rocksdb"]["state_bytes"] > 0  # the cap was sized from the moved state
    expected = window_oracle(batches_of(config.checkpoint.location), timedelta(minutes=15), timedelta(minutes=10))
    assert len(expected) > 30
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    audit = audit_sink(grown)
    assert audit.ok, audit.violations


def test_sessions_continue_on_2_partitions_and_another_store(spark: SparkSession, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "all", events=500, keys=10, files=4, seed=21)
    arrive(list(data.files[:2]), tmp_path / "landing", 1_700_000_000)
    session = {"kind": "session", "gap": "20 minutes", "window": None, "extra": None}
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 3}, aggregation=session))
    run_available(spark, config)

    # Fewer partitions, and from the RocksDB store to the HDFS-backed one (session state uses prefix-scan keys).
    report = repartition_checkpoint(config.checkpoint.location, 2, apply=True, state_store=HDFS)
    assert_verified(report, 2, spark)
    assert "HDFSBacked" in report.new_provider and "RocksDB" in report.provider

    arrive(list(data.files[2:]), tmp_path / "landing", 1_700_000_100)
    settings = {"spark": {"shuffle_partitions": 2}, "checkpoint": {"state_store": HDFS}}
    config = load_config(write_config(tmp_path, aggregation=session, **settings))
    run_available(spark, config)

    expected = session_oracle(list(data.files), timedelta(minutes=20), timedelta(minutes=10))
    actual = pd.read_parquet(tmp_path / "output")
    for column in ("sessionStart", "sessionEnd"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    actual = actual.sort_values(["user", "sessionStart"]).reset_index(drop=True)
    assert len(expected) > 15
    assert not actual.duplicated(["user", "sessionStart"]).any()
    assert list(actual["user"]) == list(expected["user"])
    assert (actual["sessionStart"] == expected["sessionStart"]).all()
    assert (actual["sessionEnd"] == expected["sessionEnd"]).all()
    assert (actual["count"] == expected["count"]).all()


T0 = datetime(2024, 1, 1, tzinfo=UTC)
USERS = [f"u{i}" for i in range(6)]
# (user, minutes after T0) per file. Every user's events lie within the 10-minute idle timeout of each other, so
# each user has one run, counted in state and in a timer until the "tick" user moves the watermark past it.
TIMER_FILES: list[list[tuple[str, int]]] = [
    [(u, m) for m in (0, 2, 4) for u in USERS],
    [*((u, 9) for u in USERS), ("tick", 12)],
    [*((u, 15) for u in USERS[:3]), ("tick", 20)],
    [("tick", 60)],
    [("tick", 66)],
]


@pytest.fixture
def processors() -> Iterator[None]:
    sys.path.insert(0, str(FIXTURES))
    try:
        yield
    finally:
        sys.path.remove(str(FIXTURES))


def _write_timer_files(folder: Path) -> list[Path]:
    folder.mkdir()
    paths = []
    for index, rows in enumerate(TIMER_FILES):
        path = folder / f"part-{index:03d}.json"
        lines = [json.dumps({"event_id": i, "user": u, "ts": (T0 + timedelta(minutes=m)).isoformat(), "value": 1.0})
                 for i, (u, m) in enumerate(rows)]  # fmt: skip
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def test_transform_with_state_keeps_counts_and_timers_across_repartition(
    spark: SparkSession, tmp_path: Path, processors: None
) -> None:
    files = _write_timer_files(tmp_path / "all")
    arrive(files[:2], tmp_path / "landing", 1_700_000_000)
    custom: dict[str, Any] = {
        "kind": "custom",
        "processor": "stateful_processors:CountUntilIdle",
        "window": None,
        "extra": None,
    }
    watermark = {"column": "ts", "watermark": "5 minutes"}
    sink = {"partition_by": []}
    config = load_config(
        write_config(tmp_path, spark={"shuffle_partitions": 3}, aggregation=custom, event_time=watermark, sink=sink)
    )
    run_available(spark, config)
    assert pd.read_parquet(tmp_path / "output").empty  # nobody has been idle long enough yet

    moved = tmp_path / "checkpoint-8"
    report = repartition_checkpoint(config.checkpoint.location, 8, apply=True, to=str(moved))
    assert_verified(report, 8, spark)
    assert report.archive is None and report.new_checkpoint == str(moved)
    labels = {t.target for t in report.verification.targets} if report.verification else set()
    assert labels == {"state", "$timers"}  # the value state and the event-time timers, both moved

    arrive(files[2:], tmp_path / "landing", 1_700_000_100)
    config = load_config(
        write_config(
            tmp_path,
            spark={"shuffle_partitions": 8},
            aggregation=custom,
            event_time=watermark,
            sink=sink,
            checkpoint={"location": str(moved)},
        )
    )
    run_available(spark, config)

    events = pd.DataFrame([(u, m) for rows in TIMER_FILES for u, m in rows], columns=["user", "minute"])
    expected = events[events["user"] != "tick"].groupby("user").size().sort_index()
    actual = pd.read_parquet(tmp_path / "output").sort_values("user").set_index("user")["events"]
    assert list(actual.index) == USERS  # every user emitted once, by a timer set before the repartition
    assert list(actual) == list(expected)


JOIN_AND_DEDUP = {
    # deduplication followed by a window aggregation (two operators) on the HDFS store, to 8 partitions
    "dedup then window": (dedup_then_window, (HDFS_PROVIDER, "false", "1", "true"), 8),
    # a stream-stream join (four stores, keyWithIndexToValue keyed by join key + index) on RocksDB, to 2
    "stream-stream join": (join, (ROCKSDB_PROVIDER, "true", "1", "true"), 2),
}


@pytest.mark.parametrize("case", list(JOIN_AND_DEDUP), ids=list(JOIN_AND_DEDUP))
def test_dedup_and_join_continue_like_the_query_that_kept_its_partitions(
    spark: SparkSession, tmp_path: Path, case: str
) -> None:
    build, conf, partitions = JOIN_AND_DEDUP[case]
    source, checkpoint, output = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    write_input(source, range(4))
    with runtime_conf(spark, {"spark.sql.shuffle.partitions": "3"}):
        run_query(spark, source, build, checkpoint, output, conf)
    shutil.copytree(checkpoint, tmp_path / "kept")
    shutil.copytree(output, tmp_path / "kept-out")

    report = repartition_checkpoint(str(checkpoint), partitions, apply=True)
    assert_verified(report, partitions, spark)

    write_input(source, range(4, 8))
    run_query(spark, source, build, checkpoint, output, conf)  # continues with the new count
    run_query(spark, source, build, tmp_path / "kept", tmp_path / "kept-out", conf)  # with 3, as it started
    moved, kept = pd.read_parquet(output), pd.read_parquet(tmp_path / "kept-out")
    columns = sorted(moved.columns)
    assert len(kept) > 0
    latest = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert Checkpoint.open(str(checkpoint)).offset(latest).conf["spark.sql.shuffle.partitions"] == str(partitions)
    assert Checkpoint.open(str(tmp_path / "kept")).offset(latest).conf["spark.sql.shuffle.partitions"] == "3"
    assert (
        moved[columns]
        .sort_values(columns)
        .reset_index(drop=True)
        .equals(kept[columns].sort_values(columns).reset_index(drop=True))
    )


FORMAT_VERSION_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
JOIN_FORMAT_KEY = "spark.sql.streaming.join.stateFormatVersion"
V2_ROCKSDB = (ROCKSDB_PROVIDER, "true", "2", "true")  # changelog checkpointing, checkpoint format v2


def _in_minute_order(folder: Path) -> None:
    """The file source reads files by modification time: one minute per file, in order, so none is late."""
    for index, file in enumerate(sorted(folder.glob("m*.json"))):
        os.utime(file, (1_700_000_000 + index, 1_700_000_000 + index))


def test_format_v2_checkpoint_stays_v2_with_ids_for_the_new_partitions(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 58: state files named by unique ids (RocksDB, checkpointFormatVersion 2) repartitioned 3 -> 5; the
    latest commit names the new partitions' files, and the query continues on them."""
    source, checkpoint, output = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    write_input(source, range(3))
    _in_minute_order(source)
    with runtime_conf(spark, {"spark.sql.shuffle.partitions": "3"}):
        run_query(spark, source, windowed, checkpoint, output, V2_ROCKSDB)
    before = Checkpoint.open(str(checkpoint))
    batch = before.latest_committed_batch()
    assert before.commit(batch).checkpoint_format == 2 and len(before.commit(batch).state_unique_ids[0]) == 3

    report = repartition_checkpoint(str(checkpoint), 5, apply=True)
    with runtime_conf(spark, {FORMAT_VERSION_KEY: "2"}):  # Spark 4.1 reads a "v2" commit log only so
        assert_verified(report, 5, spark)
    commit = Checkpoint.open(str(checkpoint)).commit(batch)
    assert commit.log_version == 2
    ids = commit.state_unique_ids[0]
    assert len(ids) == 5 and all(len(p) == 1 for p in ids) and len({p[0] for p in ids}) == 5
    for partition, (unique_id,) in enumerate(ids):  # the snapshot Spark loads next, by the id the commit names
        assert (checkpoint / "state" / "0" / str(partition) / f"{batch + 1}_{unique_id}.zip").is_file()

    write_input(source, range(3, 6))
    _in_minute_order(source)
    run_query(spark, source, windowed, checkpoint, output, V2_ROCKSDB)  # continues with 5 partitions, format v2
    latest = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert latest > batch
    assert len(Checkpoint.open(str(checkpoint)).commit(latest).state_unique_ids[0]) == 5
    assert Checkpoint.open(str(checkpoint)).offset(latest).conf["spark.sql.shuffle.partitions"] == "5"

    minute = timedelta(minutes=1)
    expected = window_oracle(batches_of(str(checkpoint)), minute, minute, key="k", value="v")
    assert len(expected) == 12  # minutes 0-3 of 3 keys: the watermark (00:04:50) closed them, nothing was late
    actual = pd.read_parquet(output)
    assert not actual.duplicated(["k", "start"]).any()
    got = {(r.k, pd.Timestamp(r.start).tz_localize(UTC)): r.s for r in actual.itertuples()}
    assert got == {(r.k, r.windowStart): r.value_sum for r in expected.itertuples()}


def test_join_state_format_3_in_checkpoint_format_v2_continues_on_2_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 58: the join's four stores as column families of one RocksDB store (join state format 3), in a format
    v2 checkpoint; 3 -> 2, then restarted on it, its output equals the pandas join of every event."""
    source, checkpoint, output = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    write_input(source, range(3))
    _in_minute_order(source)
    with runtime_conf(spark, {"spark.sql.shuffle.partitions": "3", JOIN_FORMAT_KEY: "3"}):
        run_query(spark, source, join, checkpoint, output, V2_ROCKSDB)
    batch = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert Checkpoint.open(str(checkpoint)).offset(batch).conf[JOIN_FORMAT_KEY] == "3"

    report = repartition_checkpoint(str(checkpoint), 2, apply=True)
    with runtime_conf(spark, {FORMAT_VERSION_KEY: "2"}):
        assert_verified(report, 2, spark)
    [store] = report.stores
    assert set(store.column_families) == set(JOIN_STORES)  # one store, the four as its families
    assert len(Checkpoint.open(str(checkpoint)).commit(batch).state_unique_ids[0]) == 2

    # Read first after the move: each key 5 s after a left row kept in the moved state, which it must find there.
    rows = [{"k": f"k{j}", "ts": f"2024-01-01T00:02:{j * 10 + 5:02d}Z", "v": 1000 + j} for j in range(3)]
    (source / "m002x.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_input(source, range(3, 6))
    _in_minute_order(source)
    run_query(spark, source, join, checkpoint, output, V2_ROCKSDB)  # join format 3 and 2 partitions, as recorded
    latest = Checkpoint.open(str(checkpoint)).latest_committed_batch()
    assert Checkpoint.open(str(checkpoint)).offset(latest).conf["spark.sql.shuffle.partitions"] == "2"

    # 42 pairs: each event with itself, and the three added after the move with moved left rows.
    assert_join_output_matches_pandas(source, output, pairs_expected=42)


# As other Sparks recorded them (tests/fixtures/corpus): checkpoint format v2, read by the ids its commits name, with
# changelog lineage (4.1.4) and as 4.3's real-time mode writes it (StatefulStreamlineAggregate, changelogs only);
# join state format 3 (4.2.1: the four stores as column families). Join state format 4 needs Spark 4.2+ to be opened
# at all: its recorded checkpoints are moved in the 4.2 and 4.3 smoke runs (tests/smoke/test_smoke_join_v4.py).
RECORDED = ("spark-4.1.4/rocksdb_v2_window", "spark-4.3.0/rocksdb_real_time_window", "spark-4.2.1/rocksdb_join_v3")


@pytest.mark.parametrize("case", RECORDED)
def test_recorded_checkpoints_repartition_to_3(spark: SparkSession, tmp_path: Path, case: str) -> None:
    """Their sources are gone (the corpus is for reading): Spark's reader before and after is the proof."""
    checkpoint = Path(shutil.copytree(CORPUS / case / "checkpoint", tmp_path / "checkpoint"))
    expected = json.loads((CORPUS / case / "expected.json").read_text())
    batch = expected["last_committed_batch"]
    v2 = Checkpoint.open(str(checkpoint)).commit(batch).checkpoint_format == 2
    report = repartition_checkpoint(str(checkpoint), 3, apply=True, to=str(tmp_path / "new"))
    with runtime_conf(spark, {FORMAT_VERSION_KEY: "2"} if v2 else {}):
        assert_verified(report, 3, spark)
    assert report.verification is not None
    rows = {t.target: t.rows_after for t in report.verification.targets}
    assert rows == {s["name"]: s["rows"] for s in expected["operators"][0]["stores"]}  # as Spark counted them
    ids = Checkpoint.open(str(tmp_path / "new")).commit(batch).state_unique_ids
    assert len(ids[0]) == 3 if v2 else not ids
    for partition, (unique_id,) in enumerate(ids.get(0, [])):
        assert (tmp_path / "new" / "state" / "0" / str(partition) / f"{batch + 1}_{unique_id}.zip").is_file()


def test_verification_finds_a_changed_row_and_counts_it(spark: SparkSession, tmp_path: Path) -> None:
    """Two checkpoints of the same data but one event's value: the checksums differ, the row match counts 1 + 1."""
    data = generate_events(tmp_path / "all", events=600, keys=5, files=2, seed=11)
    lines = [json.loads(line) for file in data.files for line in file.read_text().splitlines()]
    newest = max(range(len(lines)), key=lambda i: lines[i]["ts"])  # its window is still open, so in state
    checkpoints = []
    for side, bump in (("same", 0.0), ("other", 1000.0)):
        folder = tmp_path / side
        (folder / "landing").mkdir(parents=True)
        changed = [dict(line, value=line["value"] + bump) if i == newest else line for i, line in enumerate(lines)]
        (folder / "landing" / "events.json").write_text("".join(json.dumps(line) + "\n" for line in changed))
        config = load_config(
            write_config(
                folder,
                source={"path": str(folder / "landing")},
                spark={"shuffle_partitions": 3},
                checkpoint={"location": str(folder / "checkpoint"), "state_store": HDFS},
                sink={"path": str(folder / "output")},
            )
        )
        run_available(spark, config)
        checkpoints.append(config.checkpoint.location)
    twin = tmp_path / "twin"
    shutil.copytree(checkpoints[0], twin)
    batch = Checkpoint.open(checkpoints[0]).latest_committed_batch()
    assert batch == Checkpoint.open(checkpoints[1]).latest_committed_batch()

    same = compare_state(spark, open_state_source(checkpoints[0]), open_state_source(str(twin)), batch)
    assert same.same and same.targets and all(t.rows_before == t.rows_after > 0 for t in same.targets)

    differ = compare_state(spark, open_state_source(checkpoints[0]), open_state_source(checkpoints[1]), batch)
    assert not differ.same
    (target,) = differ.targets
    assert target.rows_before == target.rows_after == same.targets[0].rows_before
    assert (target.only_before, target.only_after) == (1, 1)
