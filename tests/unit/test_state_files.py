"""State files read without Spark: the codecs' framing, the record formats, store replay and UnsafeRow decoding.

Streams are built here from the framing as lz4-java, snappy-java, zstd and ning-compress write it (pyarrow does the
raw compression); the records as Spark's DataOutputStream writes them; UnsafeRows by an encoder written from
Spark's layout. The recorded Spark checkpoints are read in tests/unit/test_state_corpus.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from tidemark.formats import Checkpoint
from tidemark.formats.codec import Codec, CodecError, check_ends, decompress
from tidemark.formats.layout import FileKind
from tidemark.formats.state_records import RecordKind, StateFileError, parse_state_file
from tidemark.formats.state_replay import Method, StateNotReadable, read_store
from tidemark.formats.unsafe_row import RowDecodeError, decode_row, fields_from_ddl

PAYLOAD = b"".join(f"record {i} of the state file; ".encode() for i in range(2000))


def lz4_java(data: bytes, block: int = 1 << 15) -> bytes:
    """lz4-java's LZ4BlockOutputStream: compressed blocks, then the empty end block."""
    codec = pa.Codec("lz4_raw")
    out = b""
    for at in range(0, len(data), block):
        chunk = data[at : at + block]
        packed = codec.compress(chunk).to_pybytes()
        out += b"LZ4Block" + bytes([0x20 | 5]) + struct.pack("<iii", len(packed), len(chunk), 0) + packed
    return out + b"LZ4Block" + bytes([0x10 | 5]) + struct.pack("<iii", 0, 0, 0)


def snappy_java(data: bytes, block: int = 1 << 15) -> bytes:
    """snappy-java's SnappyOutputStream: magic, two version ints, then length-prefixed raw snappy chunks."""
    codec = pa.Codec("snappy")
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for at in range(0, len(data), block):
        packed = codec.compress(data[at : at + block]).to_pybytes()
        out += struct.pack(">i", len(packed)) + packed
    return out


def zstd_stream(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as stream:
        stream.write(data)
    return sink.getvalue().to_pybytes()


def lzf_stream() -> tuple[bytes, bytes]:
    """One compressed LZF chunk: the literal 'abc', then a 6-byte back reference 3 bytes back."""
    chunk = bytes([2]) + b"abc" + bytes([4 << 5, 2])
    stream = b"ZV\x01" + struct.pack(">HH", len(chunk), 9) + chunk + b"ZV\x00" + struct.pack(">H", 2) + b"!!"
    return stream, b"abcabcabc!!"


@pytest.mark.parametrize(
    ("codec", "encode"), [(Codec.LZ4, lz4_java), (Codec.SNAPPY, snappy_java), (Codec.ZSTD, zstd_stream)]
)
def test_codec_streams_decompress(codec: Codec, encode: object) -> None:
    stream = encode(PAYLOAD)  # type: ignore[operator]
    assert decompress(stream) == (codec, PAYLOAD)
    with pytest.raises(CodecError):
        decompress(stream[: len(stream) * 2 // 3])


def test_lzf_stream_decompresses() -> None:
    stream, plain = lzf_stream()
    assert decompress(stream) == (Codec.LZF, plain)


def test_cheap_end_check_catches_a_truncated_lz4_file() -> None:
    stream = lz4_java(PAYLOAD)
    assert check_ends(stream[:64], stream[-64:]) is Codec.LZ4
    cut = stream[:-30]
    with pytest.raises(CodecError, match="truncated"):
        check_ends(cut[:64], cut[-64:])
    for bad in (b"", b"\x00garbage!"):
        with pytest.raises(CodecError):
            check_ends(bad, bad)


def _record(key: bytes, value: bytes | None) -> bytes:
    if value is None:
        return struct.pack(">i", len(key)) + key + struct.pack(">i", -1)
    return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value


def _utf(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def test_delta_and_snapshot_records() -> None:
    delta = lz4_java(_record(b"a", b"1") + _record(b"b", None) + struct.pack(">i", -1))
    parsed = parse_state_file(delta, FileKind.STATE_DELTA)
    assert parsed.records == ((RecordKind.PUT, b"a", b"1"), (RecordKind.DELETE, b"b", None))
    with pytest.raises(StateFileError, match="value size"):
        parse_state_file(delta, FileKind.SNAPSHOT)  # a snapshot holds no removals
    with pytest.raises(StateFileError, match="no end marker"):
        parse_state_file(lz4_java(_record(b"a", b"1")), FileKind.STATE_DELTA)


def test_changelog_versions() -> None:
    v2 = _utf("v2") + b"\x01" + _record(b"k", b"v") + b"\x11" + _record(b"k", b"w") + b"\x10" + _record(b"x", None)
    parsed = parse_state_file(lz4_java(v2 + b"\x00"), FileKind.CHANGELOG)
    assert parsed.format_version == 2
    assert [r[0] for r in parsed.records] == [RecordKind.PUT, RecordKind.MERGE, RecordKind.DELETE]
    lineage = json.dumps([{"version": 1, "checkpointUniqueId": "u1"}])
    v3 = _utf("v3") + _utf(lineage) + _record(b"k", b"v") + struct.pack(">i", -1)
    parsed = parse_state_file(lz4_java(v3), FileKind.CHANGELOG)
    assert (parsed.format_version, parsed.lineage, len(parsed.records)) == (3, ((1, "u1"),), 1)
    # v1 has no version line: its first int is a key size.
    parsed = parse_state_file(lz4_java(_record(b"k", b"v") + struct.pack(">i", -1)), FileKind.CHANGELOG)
    assert parsed.format_version == 1 and parsed.records == ((RecordKind.PUT, b"k", b"v"),)


def _store(root: Path, files: dict[str, bytes]) -> Checkpoint:
    folder = root / "state" / "0" / "0"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Checkpoint.open(str(root))


def _file(*records: bytes) -> bytes:
    return lz4_java(b"".join(records) + struct.pack(">i", -1))


def test_hdfs_replay_starts_from_the_newest_snapshot(tmp_path: Path) -> None:
    checkpoint = _store(
        tmp_path,
        {
            "1.delta": _file(_record(b"a", b"1"), _record(b"b", b"1")),
            "2.delta": _file(_record(b"a", None), _record(b"c", b"1")),
            "2.snapshot": _file(_record(b"b", b"1"), _record(b"c", b"1"), _record(b"d", b"from snapshot")),
            "3.delta": _file(_record(b"b", None), _record(b"e", b"22")),
        },
    )
    rows = read_store(checkpoint, 0, 0, "default", 3, keep_entries=True)
    # The snapshot of version 2 wins over its delta, so `d` is there; version 3 removes b and adds e.
    assert rows.entries == {b"c": b"1", b"d": b"from snapshot", b"e": b"22"}
    assert (rows.rows, rows.size, rows.method) == (3, 2 + 14 + 3, Method.REPLAYED)
    assert rows.files == ("state/0/0/2.snapshot", "state/0/0/3.delta")
    assert read_store(checkpoint, 0, 0, "default", 1).rows == 2


def test_hdfs_replay_needs_every_delta(tmp_path: Path) -> None:
    checkpoint = _store(tmp_path, {"1.delta": _file(_record(b"a", b"1")), "3.delta": _file()})
    with pytest.raises(StateNotReadable, match=r"2\.delta is missing"):
        read_store(checkpoint, 0, 0, "default", 3)


def test_rocksdb_with_a_broken_chain_is_not_read_but_said(tmp_path: Path) -> None:
    checkpoint = _store(tmp_path, {"2.changelog": _file(), "3.changelog": _file()})
    with pytest.raises(StateNotReadable, match="cannot rebuild version 3"):
        read_store(checkpoint, 0, 0, "default", 3)


# --- UnsafeRow ------------------------------------------------------------------------------------------------


def _bitset(n: int) -> int:
    return ((n + 63) // 64) * 8


def unsafe_row(values: list[tuple[str, object]]) -> bytes:
    """An UnsafeRow as Spark's UnsafeRowWriter lays it out: null bits, 8-byte slots, 8-byte aligned variable data."""
    head = bytearray(_bitset(len(values)) + 8 * len(values))
    tail = bytearray()
    for i, (kind, value) in enumerate(values):
        slot = _bitset(len(values)) + 8 * i
        if value is None:
            head[i // 8] |= 1 << (i % 8)
            continue
        if kind in ("long", "timestamp"):
            struct.pack_into("<q", head, slot, value)
        elif kind == "int":
            struct.pack_into("<i", head, slot, value)
        elif kind == "double":
            struct.pack_into("<d", head, slot, value)
        elif kind == "bool":
            struct.pack_into("<?", head, slot, value)
        else:  # variable length: string, nested row, array
            raw = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            offset = len(head) + len(tail)
            struct.pack_into("<q", head, slot, (offset << 32) | len(raw))
            tail += raw + b"\x00" * (-len(raw) % 8)
    return bytes(head + tail)


def long_array(values: list[int | None]) -> bytes:
    out = bytearray(struct.pack("<q", len(values)) + bytes(_bitset(len(values))))
    for i, v in enumerate(values):
        if v is None:
            out[8 + i // 8] |= 1 << (i % 8)
        out += struct.pack("<q", v or 0)
    return bytes(out)


def test_unsafe_row_decodes_with_a_ddl_schema() -> None:
    start, end = 1_704_067_260_000_000, 1_704_067_320_000_000
    window = unsafe_row([("timestamp", start), ("timestamp", end)])
    key = unsafe_row([("row", window), ("string", "k1"), ("int", -7), ("long", None), ("bool", True)])
    fields = fields_from_ddl("window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, k STRING, n INT, m BIGINT, b BOOLEAN")
    decoded = decode_row(key, fields)
    assert decoded == {
        "window": {
            "start": dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.timezone.utc),
            "end": dt.datetime(2024, 1, 1, 0, 2, tzinfo=dt.timezone.utc),
        },
        "k": "k1",
        "n": -7,
        "m": None,
        "b": True,
    }
    value = unsafe_row([("double", 2.5), ("long", 1234), ("array", long_array([1, None, 3]))])
    got = decode_row(value, fields_from_ddl("avg DOUBLE, total DECIMAL(10, 2), xs ARRAY<BIGINT>"))
    assert got == {"avg": 2.5, "total": decimal.Decimal("12.34"), "xs": [1, None, 3]}


def test_a_wrong_schema_is_an_error_not_garbage() -> None:
    row = unsafe_row([("long", 5)])
    with pytest.raises(RowDecodeError):
        decode_row(row, fields_from_ddl("a STRING, b STRING, c STRING"))
    with pytest.raises(RowDecodeError):
        decode_row(unsafe_row([("long", 1 << 40)]), fields_from_ddl("s STRING"))


@pytest.mark.parametrize("ddl", ["", "a", "a STRUCT<b INT", "a FANCY", "a INT,, b"])
def test_bad_ddl(ddl: str) -> None:
    with pytest.raises(ValueError, match=r"DDL|columns"):
        fields_from_ddl(ddl)


def _v(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_sst_index_blocks_with_delta_encoded_values() -> None:
    """RocksDB format version 4+: index entries carry no value length; an entry whose key shares bytes with the
    one before holds only the zigzag size delta of the next block (which starts right after the previous one)."""
    from tidemark.formats.rocksdb_sst import TRAILER, _index_handles

    entries = _v(0) + _v(2) + b"k1" + _v(0) + _v(100)  # restart point: the full handle (0, 100)
    entries += _v(1) + _v(1) + b"2" + _v(2 * 20)  # shares "k": size 100 + 20
    entries += _v(1) + _v(1) + b"3" + _v(2 * 30 - 1)  # size 120 - 30
    block = entries + struct.pack("<I", 0) + struct.pack("<I", 1)
    assert _index_handles(block, delta_encoded=True, first_key=False) == [
        (0, 100),
        (100 + TRAILER, 120),
        (100 + TRAILER + 120 + TRAILER, 90),
    ]
    plain = _v(0) + _v(1) + b"a" + _v(2) + _v(7) + _v(8) + struct.pack("<I", 0) + struct.pack("<I", 1)
    assert _index_handles(plain, delta_encoded=False, first_key=False) == [(7, 8)]


def test_a_truncated_sst_is_an_error() -> None:
    from tidemark.formats.rocksdb_sst import SstError, read_sst

    corpus = Path(__file__).parents[1] / "fixtures" / "corpus" / "spark-3.5.9" / "rocksdb_window" / "checkpoint"
    sst = next((corpus / "state" / "0" / "0" / "SSTs").glob("*.sst")).read_bytes()
    assert list(read_sst(sst))
    for damaged in (sst[:-30], sst[:200] + bytes(len(sst) - 200), b"not an sst at all" * 5):
        with pytest.raises(SstError):
            list(read_sst(damaged))
