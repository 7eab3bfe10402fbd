"""The sink layout commands compare with the config: footers from the files the sink log lists (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tidemark.context import PipelineContext
from tidemark.errors import StorageError
from tidemark.sinks.parquet import read_sink_layout
from tidemark.storage.open import open_storage

COLUMNS = ["user", "windowEnd", "count"]


def _sink(root: Path, logged_under: Path) -> Path:
    """A windowStart-partitioned sink: one committed file, and a killed batch's file of other columns."""
    folder = root / "output" / "windowStart=2026-01-01 00%3A00%3A00"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({c: [1] for c in COLUMNS}), folder / "part-00000-a.c000.snappy.parquet")
    pq.write_table(pa.table({"x": pa.array([], pa.int64())}), folder / "part-00000-b.c000.snappy.parquet")
    log = root / "output" / "_spark_metadata"
    log.mkdir()
    entry = {
        "path": f"file://{logged_under}/windowStart=2026-01-01%2000%253A00%253A00/part-00000-a.c000.snappy.parquet",
        "size": 1,
        "isDir": False,
        "modificationTime": 0,
        "blockReplication": 1,
        "blockSize": 1,
        "action": "add",
    }
    (log / "0").write_text("v1\n" + json.dumps(entry))
    return root / "output"


def test_a_file_the_log_does_not_list_is_not_part_of_the_sink(tmp_path: Path) -> None:
    sink = _sink(tmp_path, logged_under=tmp_path / "output")
    layout = read_sink_layout(open_storage(str(sink)))
    assert (layout.files, layout.partition_columns) == (2, ("windowStart",))
    assert (layout.columns, layout.schemas, layout.footers_read) == (tuple(COLUMNS), 1, 1)


def test_a_copied_sink_whose_log_names_the_old_folder_reads_every_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path, logged_under=tmp_path / "elsewhere" / "output")
    layout = read_sink_layout(open_storage(str(sink)))
    assert (layout.schemas, layout.footers_read) == (2, 2)


def test_a_killed_batchs_empty_file_is_not_part_of_a_sink_whose_log_lists_no_file_yet(tmp_path: Path) -> None:
    """Append-mode windows emit nothing in the first batches, so the log's entries list no file; a driver killed
    while the next batch wrote leaves a 0-byte part file. Found by the Kafka chaos test: the restart refused to run
    ("not a readable Parquet file ... 0 bytes") because the layout read every file when the log listed none."""
    from tests.helpers import write_config
    from tidemark.config import load_config
    from tidemark.pipeline.sink_check import check_sink

    sink = tmp_path / "output"
    folder = sink / "windowStart=2026-01-01 00%3A00%3A00"
    folder.mkdir(parents=True)
    (folder / "part-00001-killed.c000.snappy.parquet").write_bytes(b"")
    (sink / "_spark_metadata").mkdir()
    (sink / "_spark_metadata" / "0").write_text("v1")  # batch 0 committed, no file written
    layout = read_sink_layout(open_storage(str(sink)))
    assert (layout.files, layout.footers_read, layout.columns) == (1, 0, ())
    config = load_config(write_config(tmp_path, sink={"path": str(sink)}))
    found = check_sink(PipelineContext.of(config))
    assert found is not None and (found.uri, found.problem) == (layout.uri, None)
    # Without a log the same file is all the sink holds, and a torn file there is an error, not skipped.
    (sink / "_spark_metadata" / "0").unlink()
    (sink / "_spark_metadata").rmdir()
    with pytest.raises(StorageError, match="not a readable Parquet file"):
        read_sink_layout(open_storage(str(sink)))


def test_every_reader_of_a_sink_takes_the_same_files_as_committed(tmp_path: Path) -> None:
    """The layout check and adopt's window read share one rule: the log's files, or every file of a copied sink."""
    from datetime import UTC, datetime

    from tidemark.sinks.parquet import committed_data_files
    from tidemark.sinks.parquet.layout import sink_windows

    own = open_storage(str(_sink(tmp_path / "own", logged_under=tmp_path / "own" / "output")))
    found = committed_data_files(own)
    assert (len(found.present), len(found.committed), len(found.uncommitted), found.copied) == (2, 1, 1, False)
    assert found.committed[0].endswith("-a.c000.snappy.parquet")
    windows = sink_windows(own)
    assert (windows.files, windows.rows, windows.uncommitted, windows.copied) == (1, 1, found.uncommitted, False)
    assert windows.newest_start == datetime(2026, 1, 1, tzinfo=UTC)

    # A sink copied from elsewhere: its log cannot tell committed from not, so both files are its windows (adopt
    # must see a copied sink's windows to refuse writing them twice), and nothing is called uncommitted.
    copied = open_storage(str(_sink(tmp_path / "copy", logged_under=tmp_path / "elsewhere" / "output")))
    found = committed_data_files(copied)
    assert (len(found.committed), found.uncommitted, found.copied) == (2, (), True)
    windows = sink_windows(copied)
    assert (windows.files, windows.rows, windows.copied) == (2, 1, True)
    assert windows.newest_start == datetime(2026, 1, 1, tzinfo=UTC)


def test_the_duplicate_check_reads_a_plain_folder_as_a_plain_reader_would(tmp_path: Path) -> None:
    """`audit`'s duplicate check over a Parquet sink (the sink's `table_rows`: every data file, partition values
    from Hive folders): a (key, window) in two files counts once as repeated, and a `windowStart=` folder whose
    value is no time (a copy someone parked there) is compared as it is instead of failing the audit."""
    from datetime import UTC, datetime

    from tests.helpers import write_config
    from tidemark.config import load_config
    from tidemark.context import PipelineContext
    from tidemark.recovery.audit import key_columns, table_duplicates

    sink = tmp_path / "output"
    end = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    for folder, name, users in (
        ("windowStart=2026-01-01 00%3A00%3A00", "part-0.parquet", ["a", "b"]),
        ("windowStart=2026-01-01 00%3A00%3A00", "part-1.parquet", ["b"]),  # b's window again
        ("windowStart=backup", "part-2.parquet", ["a"]),
    ):
        (sink / folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"user": users, "windowEnd": [end] * len(users)}), sink / folder / name)
    config = load_config(write_config(tmp_path, sink={"path": str(sink)}))
    rows, repeated, examples = table_duplicates(PipelineContext.of(config).sink, key_columns(config))
    assert (rows, repeated) == (4, 1)
    assert examples == ["b, 2026-01-01T00:00:00+00:00, 2026-01-01T00:10:00+00:00"]
