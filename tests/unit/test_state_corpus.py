"""Every tool that reads without Spark, on every checkpoint of the corpus (tests/fixtures/corpus): Spark 2.4 to 4.3.

`checkpoint inspect` must be right on all of them; `state stats --reader files` exact against the figures Spark
itself reported (expected.json: numRowsTotal of the last progress event, per-store counts of Spark's reader) or,
where the files cannot give them, a "cannot read state of operator N" and exit 1; `state show --reader files`
must decode exactly the rows an independent pandas computation over the corpus input leaves in state. None of
them may change a byte, a name or a modification time in the checkpoint.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tidemark.cli.main import main
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint
from tidemark.sinks.parquet import read_sink_log
from tidemark.spark.lines import Feature, lacking
from tidemark.statestore.show import show_state
from tidemark.statestore.stats import Reader, state_stats
from tidemark.storage import open_storage

CORPUS = Path(__file__).parents[1] / "fixtures" / "corpus"
CASES = sorted(f"{case.parent.name}/{case.name}" for case in CORPUS.glob("spark-*/*") if case.is_dir())
PROVIDERS = {
    "HDFSBackedStateStoreProvider": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "RocksDBStateStoreProvider": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def _expected(case: str) -> dict[str, Any]:
    return json.loads((CORPUS / case / "expected.json").read_text())


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below root: size (-1 for folders) and modification time."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size if name in files else -1, stat.st_mtime_ns)
    return found


def copy(case: str, tmp_path: Path) -> Path:
    """A copy of the case's checkpoint, so a tool that wrote into it could not spoil the corpus."""
    return Path(shutil.copytree(CORPUS / case / "checkpoint", tmp_path / "checkpoint"))


def test_the_corpus_is_there() -> None:
    assert len(CASES) >= 50 and any(c.startswith("spark-2.4.8/") for c in CASES)


@pytest.mark.parametrize("case", CASES)
def test_inspect_is_right(case: str, tmp_path: Path) -> None:
    checkpoint = copy(case, tmp_path)
    expected = _expected(case)
    before = listing(checkpoint)
    report = inspect_checkpoint(str(checkpoint))
    assert listing(checkpoint) == before
    assert report.findings == [], report.findings
    assert report.latest_committed_batch == expected["last_committed_batch"]
    assert report.oldest_offset_batch == expected["offsets_batches"][0]
    assert report.latest_offset_batch == expected["offsets_batches"][-1]
    provider = expected["settings"]["spark.sql.streaming.stateStore.providerClass"]
    assert PROVIDERS[report.state_provider or ""] == provider
    watermark = expected.get("last_batch_watermark_ms")
    if isinstance(watermark, str) and watermark != "1970-01-01T00:00:00.000Z":
        stamp = dt.datetime.fromisoformat(watermark.replace("Z", "+00:00"))
        assert report.latest_offset_watermark == stamp
    assert [op.id for op in report.operators] == [op["operator_id"] for op in expected["operators"]]
    for op, spec in zip(report.operators, expected["operators"], strict=True):
        if op.column_families:  # join state format 3+: one store, the join's stores its column families
            assert op.store_names == ["default"]
            assert op.column_families == [s["name"] for s in spec["stores"]]
        else:
            assert op.store_names == [s["name"] for s in spec["stores"]]


@pytest.mark.parametrize("case", CASES)
def test_state_stats_from_the_files_is_exact(case: str, tmp_path: Path) -> None:
    checkpoint = copy(case, tmp_path)
    expected = _expected(case)
    before = listing(checkpoint)
    result = state_stats(checkpoint, reader=Reader.FILES)
    assert listing(checkpoint) == before
    assert result.unreadable == []
    assert result.batch == expected["last_committed_batch"]
    for spec in expected["operators"]:
        stores = {op.store: op for op in result.operators if op.id == spec["operator_id"]}
        assert sorted(stores) == sorted(s["name"] for s in spec["stores"])
        for store in spec["stores"]:
            if store.get("rows") is not None:
                assert stores[store["name"]].rows == store["rows"], store["name"]
        # numRowsTotal of a join counts the keyWithIndexToValue stores (one row per buffered input row); in join
        # state format 4 the keys of keyWithTsToValues (one per join key and event time), where Spark's reader and
        # tidemark give one row per value: the store figures above are the ones to match there.
        if not any(name.endswith("keyWithTsToValues") for name in stores):
            counted = [s for name, s in stores.items() if "keyToNumValues" not in name]
            assert sum(s.rows or 0 for s in counted) == spec["num_rows_total"]
        assert all(s.reader is Reader.FILES for s in stores.values())
    assert main(["state", "stats", str(checkpoint), "--reader", "files", "--json"]) == 0
    assert listing(checkpoint) == before


# --- state show: the decoded rows against the input ------------------------------------------------------------


def corpus_input(minutes: int) -> pd.DataFrame:
    """The recorder's input as its README describes it: minute m holds 6 events k{j % 3} at 00:m:(10 j)s with
    v = 10 m + j, plus one exact copy of its first event."""
    rows = []
    for minute in range(minutes):
        events = [(f"k{j % 3}", pd.Timestamp("2024-01-01", tz="UTC") + pd.Timedelta(minutes=minute, seconds=10 * j),
                   10 * minute + j) for j in range(6)]  # fmt: skip
        rows += [*events, events[0]]
    return pd.DataFrame(rows, columns=["k", "ts", "v"])


WATERMARK = pd.Timestamp("2024-01-01T00:01:50", tz="UTC")  # of the last batch: max event time of batch 2 - 1 min


def window_state(watermark: pd.Timestamp = WATERMARK) -> set[tuple[Any, ...]]:
    """Windows still open after the last batch: end after its watermark; count and sum per (window, key)."""
    events = corpus_input(4)
    events["start"] = events["ts"].dt.floor("1min")
    grouped = events.groupby(["start", "k"]).agg(n=("v", "size"), s=("v", "sum")).reset_index()
    kept = grouped[grouped["start"] + pd.Timedelta(minutes=1) > watermark]
    return {(r.start.to_pydatetime(), r.k, int(r.n), int(r.s)) for r in kept.itertuples()}


def dedup_state() -> set[tuple[Any, ...]]:
    """Distinct (k, ts) whose event time is after the last batch's watermark."""
    events = corpus_input(4).drop_duplicates(["k", "ts"])
    return {(r.ts.to_pydatetime(), r.k) for r in events[events["ts"] > WATERMARK].itertuples()}


SHOWN = [
    c for c in CASES if c.split("/")[1] in ("hdfs_window", "hdfs_dedup", "rocksdb_window", "rocksdb_changelog_window")
]
SHOWN += [c for c in CASES if c.endswith("/rocksdb_v2_window") and not c.startswith("spark-4.0")]
# Real-time mode (4.3): its batches end by time, not by file, so its last watermark is its own (expected.json's).
SHOWN += [c for c in CASES if c.endswith("/rocksdb_real_time_window")]


@pytest.mark.parametrize("case", SHOWN)
def test_state_show_from_the_files_decodes_the_rows_the_input_leaves(case: str, tmp_path: Path) -> None:
    checkpoint = copy(case, tmp_path)
    before = listing(checkpoint)
    schemas: dict[str, str | None] = {"key_schema": None, "value_schema": None}
    if case.startswith("spark-2.4.8/"):  # Spark 2.x wrote no schema file: the user gives it
        window = "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, k STRING"
        schemas = {"key_schema": window, "value_schema": "n BIGINT, s BIGINT"}
        if "dedup" in case:
            schemas = {"key_schema": "k STRING, ts TIMESTAMP", "value_schema": ""}
    shown = show_state(checkpoint, limit=None, reader="files", **schemas)
    assert listing(checkpoint) == before
    rows = [dict(zip(shown.columns, row, strict=True)) for row in shown.rows]
    key = [c for c in shown.columns if c.startswith("key_")]
    value = [c for c in shown.columns if c.startswith("value_")]
    if "dedup" in case:
        got = {(dt.datetime.fromisoformat(r[key[1]]), r[key[0]]) for r in rows}
        assert got == dedup_state()
    else:
        got = {(dt.datetime.fromisoformat(r[key[0]]), r[key[2]], r[value[0]], r[value[1]]) for r in rows}
        watermark = pd.Timestamp(_expected(case)["last_batch_watermark_ms"]) if "real_time" in case else WATERMARK
        assert got == window_state(watermark)
    assert len(rows) == len(got)  # no key twice


def test_show_without_a_schema_file_asks_for_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = copy("spark-2.4.8/hdfs_window", tmp_path)
    assert main(["state", "show", str(checkpoint), "--reader", "files"]) == 2
    assert "--key-schema" in capsys.readouterr().err
    wrong = ["--key-schema", "a STRING, b STRING, c STRING, d STRING", "--value-schema", "x STRING"]
    assert main(["state", "show", str(checkpoint), *wrong]) == 2
    assert "do not fit the schema" in capsys.readouterr().err


@pytest.fixture
def spark_35(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed Spark is 3.5 (no state reader), and no Spark session may start."""

    def no_session(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr("tidemark.spark.lines.installed_version", lambda: "3.5.7")
    monkeypatch.setattr("tidemark.session.build_session", no_session)


@pytest.mark.usefixtures("spark_35")
def test_without_spark_s_reader_auto_reads_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    window = copy("spark-3.5.9/rocksdb_window", tmp_path / "a")
    [op] = state_stats(window).operators
    assert (op.rows, op.reader) == (9, Reader.FILES)  # RocksDB snapshots: the rows of their SST files

    long_run = copy("spark-3.5.9/rocksdb_changelog_long_run", tmp_path / "b")
    assert [op.rows for op in state_stats(long_run).operators] == [9]  # a snapshot's SSTs plus a changelog

    assert main(["state", "stats", str(window), "--reader", "spark"]) == 1
    assert "needs Spark 4.0 or newer" in capsys.readouterr().err

    hdfs = copy("spark-3.5.9/hdfs_window", tmp_path / "c")
    assert main(["state", "show", str(hdfs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reader"] == "files"


@pytest.mark.usefixtures("spark_35")
def test_state_the_files_cannot_give_is_an_error_not_a_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long_run = copy("spark-3.5.9/rocksdb_changelog_long_run", tmp_path)
    for sst in (long_run / "state" / "0" / "1" / "SSTs").glob("*.sst"):
        sst.unlink()  # what the newest snapshot of partition 1 is made of
    assert main(["state", "stats", str(long_run)]) == 1
    err = capsys.readouterr().err.replace("\n", " ")
    assert "cannot read state of operator 0" in err and "which is gone" in err
    assert main(["state", "show", str(long_run)]) == 1
    assert "which is gone" in capsys.readouterr().err.replace("\n", " ")


def test_a_snapshot_whose_ssts_cannot_be_read_is_counted_from_its_metadata(tmp_path: Path) -> None:
    window = copy("spark-3.5.9/rocksdb_window", tmp_path)
    for sst in (window / "state" / "0" / "0" / "SSTs").glob("*.sst"):
        sst.write_bytes(sst.read_bytes()[:-20])  # no footer any more
    [op] = state_stats(window, reader=Reader.FILES).operators
    assert op.rows == 9 and op.approx_bytes is None and "row count Spark recorded" in (op.note or "")


def test_join_stores_report_their_own_disk_bytes(tmp_path: Path) -> None:
    checkpoint = copy("spark-3.5.9/rocksdb_changelog_join", tmp_path)
    result = state_stats(checkpoint, reader=Reader.FILES)
    on_disk = {
        op.store: sum(
            f.stat().st_size
            for part in (checkpoint / "state" / "0").iterdir()
            if part.name.isdigit()
            for f in (part / op.store).rglob("*")
            if f.is_file() and not f.name.endswith(".crc") and "_metadata" not in f.parts  # data, not its schema
        )
        for op in result.operators
    }
    assert {op.store: op.disk_bytes for op in result.operators} == on_disk
    assert len(set(on_disk.values())) == 4  # four different figures, not the operator's total four times


@pytest.mark.usefixtures("spark_35")
def test_commands_that_need_spark_s_reader_say_which_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = copy("spark-3.5.9/hdfs_window", tmp_path)
    for argv in (["state", "diff", str(checkpoint), "--from", "2", "--to", "3"], ["state", "expired", str(checkpoint)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "needs Spark 4.0 or newer (installed: Spark 3.5.7)" in err and len(err.strip().splitlines()) == 1


def test_the_private_copy_points_moved_schema_paths_at_its_own_files_and_leaves_the_original(tmp_path: Path) -> None:
    """Spark 4 names a transformWithState store's schema files by absolute path; Spark's reader, handed tidemark's
    private copy of a moved checkpoint, must find them in the copy (read by Spark in
    tests/integration/test_state_corpus_spark.py), while the moved checkpoint keeps every byte and checksum."""
    from tidemark.formats import Checkpoint, OperatorFile, private_copy

    moved = copy("spark-4.1.4/rocksdb_transform_with_state_in_pandas", tmp_path)
    before = listing(moved)
    recorded = (moved / "state/0/_metadata/v2/0").read_bytes()
    checkpoint = Checkpoint.open(str(moved))
    with private_copy(checkpoint, {checkpoint.latest_committed_batch() + 1}) as (root, _):
        text = (root / "state/0/_metadata/v2/0").read_text()
        paths = [p for store in OperatorFile.parse(text).stores for p in store.schema_paths]
        assert paths and all(p.startswith(f"file:{root}/state/0/_stateSchema/") for p in paths)
        assert all(Path(p.removeprefix("file:")).is_file() for p in paths)
        assert not (root / "state/0/_metadata/v2/.0.crc").exists()  # the old sum would fail Hadoop's check
    assert listing(moved) == before
    assert (moved / "state/0/_metadata/v2/0").read_bytes() == recorded


def _buffered(case: str, store: str, tmp_path: Path) -> list[tuple[Any, ...]]:
    """The rows one side of the corpus join buffers, decoded from the files: (join key, event time, v, key column)."""
    shown = show_state(copy(case, tmp_path / case.replace("/", "-")), store=store, limit=None, reader="files")
    rows = [dict(zip(shown.columns, row, strict=True)) for row in shown.rows]
    return sorted((r["value_lk"], r["value_lt"], r["value_v"], r["key_field0"]) for r in rows)


@pytest.mark.parametrize("version", ["4.2.1", "4.3.0"])
def test_join_state_formats_2_3_and_4_hold_the_same_buffered_rows(version: str, tmp_path: Path) -> None:
    # The same query over the same input on the same Spark, its join state in three layouts: folders (format 2),
    # column families (3), and format 4's (key, event time) -> several values. Decoded from the files, the left
    # side's buffered rows must be the same rows (the Spark-reader figures of each are in expected.json; the
    # integration test compares format 3's rows with Spark's own reader).
    folders = _buffered(f"spark-{version}/rocksdb_changelog_join", "left-keyWithIndexToValue", tmp_path)
    families = _buffered(f"spark-{version}/rocksdb_join_v3", "left-keyWithIndexToValue", tmp_path)
    format_4 = _buffered(f"spark-{version}/rocksdb_join_v4", "left-keyWithTsToValues", tmp_path)
    assert len(folders) == 16
    assert folders == families == format_4
    assert all(lk == key for lk, _, _, key in folders)  # the join key is the row's own key
    # Format 4's key carries the event time beside the row: the same instant as the row's own `lt`.
    shown = show_state(
        copy(f"spark-{version}/rocksdb_join_v4", tmp_path / "t"), store="left-tsWithKey", limit=None, reader="files"
    )
    times = sorted(dict(zip(shown.columns, row, strict=True))["key___event_time"] for row in shown.rows)
    expected = sorted(int(dt.datetime.fromisoformat(lt).timestamp() * 1_000_000) for _, lt, _, _ in format_4)
    assert times == expected


@pytest.mark.parametrize("case", ["spark-4.2.1/rocksdb_join_v4", "spark-4.3.0/rocksdb_join_v4"])
def test_repartition_of_join_state_format_4_names_spark_4_2_here(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Format 4's timestamp key encoders are Spark 4.2's: on the suite's Spark 4.1 the store's schema file cannot even
    # be read, so repartition says which Spark moves it, before any JVM starts, and leaves the checkpoint as it was.
    # Spark 4.2+ moves it (tests/smoke/test_smoke_join_v4.py, in the 4.2 and 4.3 smoke runs).
    needed = lacking(Feature.JOIN_STATE_V4)
    assert needed is not None, "the suite's default Spark has join state format 4: move this proof to the smoke test"
    checkpoint = copy(case, tmp_path)
    before = listing(checkpoint)
    assert main(["state", "repartition", str(checkpoint), "--partitions", "3", "--apply"]) == 1
    err = capsys.readouterr().err
    assert needed in err and "needs Spark 4.2 or newer" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert listing(checkpoint) == before


@pytest.mark.parametrize("version", ["4.2.1", "4.3.0"])
def test_named_sources_and_sinks_are_read_from_the_logs(version: str, tmp_path: Path) -> None:
    # Source and sink evolution on (Spark 4.2+): offsets v2 name the source, commits v3 the sink; checkpoint format 1.
    checkpoint = copy(f"spark-{version}/rocksdb_commits_v3_window", tmp_path)
    report = inspect_checkpoint(str(checkpoint))
    assert (report.offset_log_version, report.commit_log_version) == (2, 3)
    assert (report.source_names, report.sink_names) == (["events"], ["out"])
    assert report.checkpoint_format_version == 1 and report.findings == []
    plain = inspect_checkpoint(str(copy(f"spark-{version}/rocksdb_changelog_window", tmp_path / "plain")))
    assert (plain.offset_log_version, plain.commit_log_version, plain.sink_names) == (1, 1, [])


TWS = [c for c in CASES if "transform_with_state" in c and "apply_in_pandas" not in c]


@pytest.mark.parametrize("case", TWS)
def test_transform_with_state_variables_and_timers_from_the_files_equal_spark_s_reader(
    case: str, tmp_path: Path
) -> None:
    # Spark's reader on the writing line recorded each variable (a list state: one row per element) and, with
    # readRegisteredTimers, the timers; the files give the same (the ttl/timer/count families are not variables).
    checkpoint = copy(case, tmp_path)
    spec = _expected(case)["operators"][0]["stores"][0]["state_variables"]
    (operator,) = state_stats(checkpoint, reader=Reader.FILES).operators
    variables = {v.name: v.rows for v in operator.state_variables}
    assert variables == {v["name"]: v["rows"] for v in spec if not v["name"].startswith("$")}
    timers = [v["rows"] for v in spec if v["name"].startswith("$procTimers")]
    assert operator.timers == (timers[0] if timers else None)


def test_a_checkpoint_through_spark_s_offline_repartition_is_read_right(tmp_path: Path) -> None:
    # Recorded on Spark 4.2.1 (tools/spark_lines/record_repartition.py): 3 batches on 2 partitions, Spark's
    # offline repartition to 4 (batch 3, a copy of offsets/2 with the new count), then batch 4 on 4 partitions.
    recorded = CORPUS.parent / "spark42_repartition"
    assert sorted(p.name for p in (recorded / "out" / "_spark_metadata").glob("[0-9]*")) == ["0", "1", "2", "4"]
    checkpoint = Path(shutil.copytree(recorded / "checkpoint", tmp_path / "checkpoint"))
    assert Checkpoint.open(str(checkpoint)).repartition_batches([0, 1, 2, 3, 4]) == {3: ("2", "4")}
    report = inspect_checkpoint(str(checkpoint))
    assert [(f.code, f.severity.value) for f in report.findings] == [("SPARK_REPARTITION_BATCH", "info")]
    assert "batch 3" in report.findings[0].message and "2 -> 4" in report.findings[0].message
    assert [op.partitions for op in report.operators] == [4]
    (operator,) = state_stats(checkpoint, reader=Reader.FILES).operators
    assert len(operator.partitions) == 4 and operator.rows is not None and operator.rows > 0
    # With the file sink: its log has 0, 1, 2 and 4, and Spark's readers fail on the missing 3 (see
    # tests/integration/test_state_corpus_spark.py); the entry of an empty batch closes the gap.
    sink = Path(shutil.copytree(recorded / "out", tmp_path / "out"))
    gap = inspect_checkpoint(str(checkpoint), sink=str(sink))
    assert [(f.code, f.severity.value) for f in gap.findings] == [("SINK_LOG_GAP", "error")]
    assert f"{sink}/_spark_metadata/3 holding the single line 'v1'" in gap.findings[0].fix
    # tidemark's own readers of the sink log (audit, recover, rollback) read past the batch the checkpoint proves
    # wrote nothing; without that proof the log is incomplete.
    sink_store, recording = open_storage(str(sink)), Checkpoint.open(str(checkpoint))
    with pytest.raises(CheckpointError, match=r"no file for batch 3 .* the sink log is incomplete"):
        read_sink_log(sink_store)
    whole = read_sink_log(sink_store, empty=recording.repartition_batches)
    assert whole.latest_batch == 4
    # (the entries name the recording machine's folder: read as outside this copy, by file name the same files)
    listed = [Path(entry).name for entry in [*whole.files, *whole.outside]]
    assert sorted(listed) == sorted(p.name for p in sink.glob("*.parquet"))
    (sink / "_spark_metadata" / "3").write_text("v1")
    assert (read_sink_log(sink_store).files, read_sink_log(sink_store).outside) == (whole.files, whole.outside)
    closed = inspect_checkpoint(str(checkpoint), sink=str(sink))
    assert [f.code for f in closed.findings] == ["SPARK_REPARTITION_BATCH"]
