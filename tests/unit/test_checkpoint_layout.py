"""File names and log entries of a checkpoint, parsed without a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.formats import CommitEntry, FileKind, OffsetEntry, OperatorMetadata
from tidemark.formats.layout import classify, log_batch, log_file_batch


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("12.delta", (FileKind.STATE_DELTA, 12, None)),
        ("7.snapshot", (FileKind.SNAPSHOT, 7, None)),
        ("3.changelog", (FileKind.CHANGELOG, 3, None)),
        ("4.zip", (FileKind.ZIP, 4, None)),
        (
            "4_8028fac0-4f2c-448b-a3ab-9d6bf9552c4c.changelog",
            (FileKind.CHANGELOG, 4, "8028fac0-4f2c-448b-a3ab-9d6bf9552c4c"),
        ),
        ("000008-14c6cbe7.sst", (FileKind.SST, None, None)),
        (".1.delta.crc", (FileKind.CRC, None, None)),
        ("1.delta.crc", (FileKind.CRC, None, None)),
        (".1.delta.crc.crc", (FileKind.CRC, None, None)),
        (".1.delta.3f2a.TID1.tmp", (FileKind.OTHER, None, None)),
        ("schema", (FileKind.OTHER, None, None)),
        ("abc.delta", (FileKind.OTHER, None, None)),
    ],
)
def test_classify(name: str, expected: tuple[FileKind, int | None, str | None]) -> None:
    assert classify(name) == expected


def test_log_names() -> None:
    assert log_batch("17") == 17
    assert log_batch(".17.crc") is None
    assert log_file_batch("19.compact") == (19, True)
    assert log_file_batch("20") == (20, False)
    assert log_file_batch("x.compact") is None


def test_offset_entry() -> None:
    text = 'v1\n{"batchWatermarkMs":5000,"batchTimestampMs":9,"conf":{"a":"b"}}\n{"logOffset":3}\n-'
    entry = OffsetEntry.parse(3, text)
    assert (entry.watermark_ms, entry.timestamp_ms, entry.conf) == (5000, 9, {"a": "b"})
    assert entry.source_offsets == [{"logOffset": 3}, None]
    with pytest.raises(ValueError, match="offsets/3"):
        OffsetEntry.parse(3, "garbage")


def test_commit_entry_v2() -> None:
    text = 'v2\n{"nextBatchWatermarkMs":7,"stateUniqueIds":{"0":[["a"],["b"]]}}'
    entry = CommitEntry.parse(4, text)
    assert entry.log_version == 2
    assert entry.next_watermark_ms == 7
    assert entry.state_unique_ids == {0: [["a"], ["b"]]}


def test_operator_metadata_join() -> None:
    text = (
        'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"symmetricHashJoin"},"stateStoreInfo":'
        '[{"storeName":"left-keyToNumValues","numPartitions":2},{"storeName":"right-keyToNumValues","numPartitions":2}]}'
    )
    meta = OperatorMetadata.parse(text)
    assert meta.name == "symmetricHashJoin"
    assert meta.store_names == ["left-keyToNumValues", "right-keyToNumValues"]
    assert meta.partitions == 2


def test_batch_ids_sorted_numerically_ignoring_crc_and_temp(tmp_path: Path) -> None:
    from tidemark.formats import Checkpoint

    folder = tmp_path / "commits"
    folder.mkdir()
    for name in ("10", "2", "9", ".9.crc", "9.tmp", "._temp"):
        (folder / name).write_text("v1")
    checkpoint = Checkpoint.open(str(tmp_path))
    assert checkpoint.commit_batches() == [2, 9, 10]
    assert checkpoint.offset_batches() == []
