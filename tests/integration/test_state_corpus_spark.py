"""`state stats` and `state show` with Spark's reader (the suite's Spark 4.1) on checkpoints other Sparks wrote.

Where Spark's reader works its figures must equal what Spark reported when it wrote the checkpoint
(expected.json); where it fails (Spark 2.4 wrote no schema file, Spark 3.1 recorded a wrong one for deduplication,
Spark 4.3's list state is a format 4.1 cannot decode) tidemark reads the files instead, still exact, and says so.
No command leaves anything behind in the checkpoint (Spark's reader writes `state/<op>/<part>/_metadata` into
the folder it reads), and a reader failure is one line, never a Java stack (checked in a process of its own, so
the JVM's own output is captured too). Every corpus case is read from the files in tests/unit/test_state_corpus.py;
here one or two per kind of failure and per line keep the JVM part short.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from tests.unit.test_state_corpus import CORPUS, listing
from tidemark.cli.main import main

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

# case -> who reads it: Spark's reader, or the files after Spark's reader failed.
CASES = {
    "spark-2.4.8/hdfs_window": "files",  # no state schema file before Spark 3.1
    "spark-3.1.3/hdfs_dedup": "files",  # Spark 3.1 recorded the input row as dedup's value schema
    "spark-3.3.4/rocksdb_window": "spark",
    "spark-3.5.9/rocksdb_changelog_join": "spark",
    "spark-3.5.9/rocksdb_changelog_long_run": "spark",  # a snapshot's SSTs plus a changelog, Spark cleaned the rest
    "spark-3.5.9/hdfs_apply_in_pandas_with_state": "spark",
    "spark-4.1.4/rocksdb_transform_with_state_in_pandas": "spark",
    "spark-4.3.0/rocksdb_changelog_transform_with_state": "files",  # merge operator v2: Spark 4.1 cannot decode it
    "spark-4.1.4/rocksdb_avro_transform_with_state_ttl_timers": "spark",  # Avro, TTL, timers, evolved schema
    "spark-4.3.0/rocksdb_avro_transform_with_state_ttl_timers": "files",
    "spark-4.2.1/rocksdb_offsets_v2_window": "files",  # offset log v2: Spark 4.1's reader refuses the log version
    "spark-4.3.0/rocksdb_commits_v3_window": "files",  # commit log v3: Spark 4.1's reader refuses the log version
    "spark-4.2.1/rocksdb_join_v3": "spark",  # join state format 3: the four stores as column families
    "spark-4.3.0/rocksdb_join_v4": "files",  # join state format 4: Spark 4.1's reader does not know its stores
    "spark-4.3.0/rocksdb_real_time_window": "spark",  # real-time mode: format v2, StatefulStreamlineAggregate
}


def _copy(case: str, tmp_path: Path) -> Path:
    """The recorded checkpoint copied as a user would move one: Spark 4's operator metadata still names its state
    schema files by the recording machine's absolute paths (tidemark's private copy points them at its own)."""
    return Path(shutil.copytree(CORPUS / case / "checkpoint", tmp_path / "checkpoint"))


def _check_figures(result: dict[str, Any], expected: dict[str, Any], reader: str) -> None:
    for spec in expected["operators"]:
        stores = {op["store"]: op for op in result["operators"] if op["id"] == spec["operator_id"]}
        assert sorted(stores) == sorted(s["name"] for s in spec["stores"])
        for store in spec["stores"]:
            got = stores[store["name"]]
            assert got["reader"] == reader and got["error"] is None
            if store.get("rows") is not None:
                assert got["rows"] == store["rows"]
            if store.get("state_variables"):
                # Spark's reader counts a list's elements and a map's entries, as expected.json recorded them (the
                # files too); registered timers were read with readRegisteredTimers.
                variables = {v["name"]: v["rows"] for v in got["state_variables"]}
                recorded = [v for v in store["state_variables"] if not v["name"].startswith("$")]
                assert variables == {v["name"]: v["rows"] for v in recorded}
                timers = [v["rows"] for v in store["state_variables"] if v["name"].startswith("$procTimers")]
                assert got["timers"] == (timers[0] if timers else None)
        # Join state format 4's stores give one row per value, its numRowsTotal one per (join key, event time).
        format_4 = any(name.endswith("keyWithTsToValues") for name in stores)
        if (reader == "files" or not any(s.get("state_variables") for s in spec["stores"])) and not format_4:
            counted = [s for name, s in stores.items() if "keyToNumValues" not in name]
            assert sum(s["rows"] for s in counted) == spec["num_rows_total"]


@pytest.mark.parametrize("case", list(CASES))
def test_state_stats_with_spark_is_exact_and_leaves_nothing(
    case: str, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _copy(case, tmp_path)
    before = listing(checkpoint)
    assert main(["state", "stats", str(checkpoint), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    _check_figures(result, json.loads((CORPUS / case / "expected.json").read_text()), CASES[case])
    if CASES[case] == "files":
        assert all("Spark's reader failed" in op["note"] for op in result["operators"])
    if "commits_v3" in case:  # the reason names the Spark that reads it, not Spark's bare log-version error
        assert all("commit log v3" in op["note"] and "needs Spark 4.2" in op["note"] for op in result["operators"])
    assert listing(checkpoint) == before


def test_every_read_only_command_leaves_the_checkpoint_as_it_was(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _copy("spark-3.5.9/hdfs_window", tmp_path)
    before = listing(checkpoint)
    commands = [
        ["checkpoint", "inspect", str(checkpoint)],
        ["checkpoint", "prune", str(checkpoint), "--keep", "1"],
        ["state", "stats", str(checkpoint)],
        ["state", "show", str(checkpoint)],
        ["state", "show", str(checkpoint), "--reader", "files"],
        ["state", "diff", str(checkpoint), "--from", "2", "--to", "3"],
        ["state", "expired", str(checkpoint)],
    ]
    for argv in commands:
        assert main(argv) == 0, argv
        assert listing(checkpoint) == before, argv
    capsys.readouterr()


SCRIPT = """
import json, sys
from tidemark.cli.main import main
stats = main(["state", "stats", sys.argv[1], "--json"])
sys.stdout.flush()
print("=== show ===", flush=True)
show = main(["state", "show", sys.argv[1], "--reader", "spark"])
sys.exit(10 * stats + show)
"""


@pytest.mark.slow
def test_a_reader_failure_is_one_line_not_a_java_stack(tmp_path: Path) -> None:
    """Issue 25: on a Spark 3.1 deduplication `state stats --json` printed 76 lines of Java stack (exit 0) and
    `state show` about 200. Spark's reader still fails there; the user sees the figures (read from the files),
    and `state show --reader spark` one error line. Run in a process (and JVM) of its own, so that what the JVM
    itself prints is captured too; both commands in one JVM."""
    checkpoint = _copy("spark-3.1.3/hdfs_dedup", tmp_path)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(checkpoint)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 10 * 0 + 1, done.stderr[-3000:]
    stats_out = done.stdout.split("=== show ===")[0]
    assert json.loads(stats_out)["operators"][0]["rows"] == 12
    assert "\tat " not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "VALUE_ROW_FORMAT_VALIDATION_FAILURE" in errors[0]


# lz4, the default, is in the corpus; snappy-java's and lzf's framing in the unit tests (CI time: one run here).
@pytest.mark.parametrize("codec", ["zstd"])
def test_the_files_reader_reads_every_state_codec_spark_writes(codec: str, spark: SparkSession, tmp_path: Path) -> None:
    """HDFS-backed state written through snappy-java and zstd-jni by this Spark: the files reader gives the rows
    Spark's own reader gives."""
    from tests.streaming_queries import HDFS, run_query, windowed, write_input
    from tidemark.formats.codec import decompress
    from tidemark.session import runtime_conf
    from tidemark.statestore.show import show_state
    from tidemark.statestore.stats import Reader, state_stats

    write_input(tmp_path / "in", range(3))
    checkpoint = tmp_path / "ck"
    with runtime_conf(spark, {"spark.sql.streaming.stateStore.compression.codec": codec}):
        run_query(spark, tmp_path / "in", windowed, checkpoint, tmp_path / "out", (HDFS, "false", "1", "true"))
    delta = next((checkpoint / "state" / "0" / "0").glob("*.delta"))
    assert decompress(delta.read_bytes())[0].value == codec
    by_files = state_stats(checkpoint, reader=Reader.FILES)
    by_spark = state_stats(checkpoint, reader=Reader.SPARK)
    assert [(op.store, op.rows) for op in by_files.operators] == [(op.store, op.rows) for op in by_spark.operators]
    assert by_files.operators[0].rows
    files_rows = show_state(checkpoint, limit=None, reader="files")
    spark_rows = show_state(checkpoint, limit=None, reader="spark")
    assert files_rows.columns == spark_rows.columns

    def naive(rows: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
        # The files reader says UTC explicitly; Spark's collect gives the session's (UTC) wall time.
        return sorted(tuple(v.removesuffix("+00:00") if isinstance(v, str) else v for v in row) for row in rows)

    assert naive(files_rows.rows) == naive(spark_rows.rows)


def test_show_falls_back_to_the_files_where_spark_s_reader_fails(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _copy("spark-3.1.3/hdfs_dedup", tmp_path)
    before = listing(checkpoint)
    assert main(["state", "show", str(checkpoint), "--json"]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["reader"] == "files" and len(shown["rows"]) == 12  # the distinct (k, ts) after the watermark
    assert "Spark's reader failed" in shown["note"] and "VALUE_ROW_FORMAT_VALIDATION_FAILURE" in shown["note"]
    assert listing(checkpoint) == before


def test_spark_reads_through_symbolic_links_across_file_systems(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the checkpoint and tidemark's cache are on different file systems (no hard links), the private copy
    is symbolic links: Spark reads through them and still writes nothing into the checkpoint."""

    def no_hard_links(source: str, target: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("tidemark.formats.state_files.os.link", no_hard_links)
    checkpoint = _copy("spark-3.5.9/rocksdb_window", tmp_path)
    before = listing(checkpoint)
    assert main(["state", "stats", str(checkpoint), "--json", "--reader", "spark"]) == 0
    [op] = json.loads(capsys.readouterr().out)["operators"]
    assert (op["rows"], op["reader"]) == (9, "spark")
    assert listing(checkpoint) == before


def test_a_moved_checkpoint_whose_schema_paths_are_stale_is_read_by_spark_and_left_as_it_was(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark 4 records the state schema files by absolute path: a checkpoint copied elsewhere would send Spark's
    reader to a path that is gone. tidemark's private copy points them at its own files, so Spark's reader gives its
    figures (list and map state counted per element), and the moved checkpoint keeps its own bytes and checksums."""
    case = "spark-4.1.4/rocksdb_transform_with_state_in_pandas"
    moved = Path(shutil.copytree(CORPUS / case / "checkpoint", tmp_path / "moved"))
    metadata = moved / "state/0/_metadata/v2/0"
    recorded = metadata.read_bytes()
    assert b"/work/wt/corpus/" in recorded  # recorded elsewhere
    assert not (Path("/work/wt/corpus") / case).exists()  # and that place is gone
    before = listing(moved)
    assert main(["state", "stats", str(moved), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = json.loads((CORPUS / case / "expected.json").read_text())
    for op in result["operators"]:
        assert op["reader"] == "spark", op.get("note")
    _check_figures(result, expected, "spark")
    assert listing(moved) == before
    assert metadata.read_bytes() == recorded and (metadata.parent / ".0.crc").is_file()


def test_join_state_format_3_rows_equal_spark_s_own_reader(spark: SparkSession, tmp_path: Path) -> None:
    # The rows tidemark decodes from the column families (which the unit corpus test finds equal to formats 2 and
    # 4) against Spark 4.1's reader of the same store.
    from tidemark.statestore.show import show_state

    checkpoint = _copy("spark-4.2.1/rocksdb_join_v3", tmp_path)
    before = listing(checkpoint)
    found = {}
    for reader in ("spark", "files"):
        for store in ("left-keyWithIndexToValue", "right-keyToNumValues"):
            shown = show_state(checkpoint, store=store, limit=None, reader=reader)
            assert shown.reader == reader, shown.note
            rows = [dict(zip(shown.columns, r, strict=True)) for r in shown.rows]
            # Spark's reader gives the session's (UTC) wall time, the files reader the instant in UTC.
            found[reader, store] = sorted(tuple(str(r[c]).removesuffix("+00:00") for c in sorted(r)) for r in rows)
    for store in ("left-keyWithIndexToValue", "right-keyToNumValues"):
        assert found["spark", store] == found["files", store], store
    assert len(found["files", "left-keyWithIndexToValue"]) == 16
    assert listing(checkpoint) == before


def test_diff_samples_each_kind_when_one_kind_outnumbers_the_sample(spark: SparkSession, tmp_path: Path) -> None:
    # Batch 2 -> 3 of the window corpus case: the minute-3 windows added (3 keys) and the minute-0 ones evicted
    # (3 keys). With one sample per kind, a plain "first 3 x K rows sorted by kind" shows three added and no
    # removed key (issue 37); K of each kind shows both.
    from tidemark.statestore.diff import diff_state

    checkpoint = _copy("spark-4.1.4/hdfs_window", tmp_path)
    before = listing(checkpoint)
    (store,) = diff_state(checkpoint, 2, 3, sample=1).stores
    assert (store.added, store.updated, store.removed) == (3, 0, 3)
    assert sorted(c.change.value for c in store.samples) == ["added", "removed"]
    assert listing(checkpoint) == before


def test_spark_s_readers_fail_on_the_sink_log_gap_of_its_repartition_batch_and_v1_closes_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Recorded on Spark 4.2.1 (tools/spark_lines/record_repartition.py): the file sink's log has 0, 1, 2, 4; batch 3
    # is Spark's offline repartition. The log's absolute paths are pointed at this copy.
    recorded = CORPUS.parent / "spark42_repartition" / "out"
    sink = tmp_path / "out"
    shutil.copytree(recorded, sink)
    for entry in (sink / "_spark_metadata").glob("[0-9]*"):
        lines = entry.read_text().splitlines()
        moved = [re.sub(r'"path":"file://[^"]*/out/', f'"path":"file://{sink}/', line) for line in lines]
        entry.write_text("\n".join(moved))
    for crc in (sink / "_spark_metadata").glob(".*.crc"):
        crc.unlink()
    with pytest.raises(Exception, match="_spark_metadata/3 doesn't exist"):
        spark.read.parquet(str(sink)).count()
    (sink / "_spark_metadata" / "3").write_text("v1")  # the fix `checkpoint inspect --sink` prints
    listed = [
        json.loads(line)["path"].removeprefix("file://")
        for entry in (sink / "_spark_metadata").glob("[0-9]*")
        for line in entry.read_text().splitlines()[1:]
    ]
    expected = sum(len(pq.read_table(path)) for path in listed)
    assert spark.read.parquet(str(sink)).count() == expected > 0
