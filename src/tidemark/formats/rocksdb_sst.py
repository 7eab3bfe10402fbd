"""RocksDB's SST files as Spark's RocksDB state store writes them (block-based table), read without RocksDB.

Read off RocksDB's table/format.cc, table/block_based/block_builder.cc and db/dbformat.h:
- the footer (the file's last 53 bytes; 48 in the legacy format): checksum type, the metaindex and index block
  handles (varint64 offset and size), the format version, the magic number 0x88e241b785f4cff7;
- every block is followed by a 5-byte trailer: the compression type (0 none, 1 snappy, 2 zlib, 4/5 lz4, 7 zstd;
  all but snappy prefix the data with its varint32 decompressed size from format version 2 on) and a checksum
  (not verified here);
- a block holds prefix-compressed entries (varint32 shared, unshared and value length, the key's new bytes, the
  value), then its restart offsets and their count; index blocks of format version 4+ drop the value length
  (a full block handle, or a varsigned size delta when the key shares bytes);
- a data block's keys are internal keys: the user key, then 8 bytes (sequence << 8 | type, little-endian).

`snapshot_rows` puts a Spark RocksDB snapshot (its zip's metadata, the SST files it names) together: per user
key the newest entry wins (a value or a merge keeps the key, a deletion drops it). Anything this reader does not
know (partitioned indexes, data-block hash indexes, range deletions, unknown entry types, WAL records) is an
`SstError`, never a silent gap.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

BLOCK_MAGIC = 0x88E241B785F4CFF7
LEGACY_MAGIC = 0xDB4775248B80FB57
FOOTER_LENGTH = 53
LEGACY_FOOTER_LENGTH = 48
TRAILER = 5
# Internal key types (db/dbformat.h) Spark's store can leave in an SST.
DELETION, VALUE, MERGE, SINGLE_DELETION = 0x0, 0x1, 0x2, 0x7
KNOWN_TYPES = frozenset({DELETION, VALUE, MERGE, SINGLE_DELETION})
HASH_INDEX_FLAG = 1 << 31
TWO_LEVEL_INDEX = 2
INDEX_WITH_FIRST_KEY = 3


class SstError(ValueError):
    """The bytes are not an SST this reader can read completely."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            msg = "a varint runs past the end of its block"
            raise SstError(msg)
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _handle(data: bytes, at: int) -> tuple[tuple[int, int], int]:
    offset, at = _varint(data, at)
    size, at = _varint(data, at)
    return (offset, size), at


def _decompress(kind: int, raw: bytes) -> bytes:
    if kind == 0:
        return raw
    import pyarrow as pa

    if kind == 1:
        size, _ = _varint(raw, 0)  # snappy's own preamble
        return bytes(pa.Codec("snappy").decompress(raw, decompressed_size=size).to_pybytes())
    size, at = _varint(raw, 0)
    body = raw[at:]
    try:
        if kind in (4, 5):
            return bytes(pa.Codec("lz4_raw").decompress(body, decompressed_size=size).to_pybytes())
        if kind == 7:
            return bytes(pa.Codec("zstd").decompress(body, decompressed_size=size).to_pybytes())
        if kind == 2:
            return zlib.decompress(body, -15)
    except Exception as exc:
        msg = f"a block does not decompress ({exc})"
        raise SstError(msg) from exc
    msg = f"blocks compressed with RocksDB compression type {kind} are not supported"
    raise SstError(msg)


def _block(data: bytes, handle: tuple[int, int]) -> bytes:
    offset, size = handle
    if offset + size + TRAILER > len(data):
        msg = f"a block at {offset} (+{size}) runs past the end of the file: it is truncated"
        raise SstError(msg)
    return _decompress(data[offset + size], data[offset : offset + size])


def _restarts_start(block: bytes) -> int:
    if len(block) < 4:
        msg = "a block is shorter than its restart count"
        raise SstError(msg)
    footer = int(struct.unpack_from("<I", block, len(block) - 4)[0])
    if footer & HASH_INDEX_FLAG:
        msg = "data blocks with a hash index are not supported"
        raise SstError(msg)
    end = len(block) - 4 - 4 * footer
    if end < 0:
        msg = "a block's restart array is larger than the block"
        raise SstError(msg)
    return end


def _entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every entry of a block with value lengths (data, metaindex and properties blocks)."""
    end = _restarts_start(block)
    key = b""
    at = 0
    while at < end:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length, at = _varint(block, at)
        if shared > len(key) or at + unshared + length > end:
            msg = "a block entry runs past its block"
            raise SstError(msg)
        key = key[:shared] + block[at : at + unshared]
        at += unshared
        yield key, block[at : at + length]
        at += length


def _index_handles(block: bytes, delta_encoded: bool, first_key: bool) -> list[tuple[int, int]]:
    """The data block handles an index block lists. Format version 4+ (delta_encoded) drops the value length: a
    value is a full handle, or, where the key shares bytes with the one before, a zigzag varint size delta."""
    end = _restarts_start(block)
    handles: list[tuple[int, int]] = []
    at = 0
    while at < end:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length = None
        if not delta_encoded:
            length, at = _varint(block, at)
        at += unshared  # the key: not needed to find the blocks
        start = at
        if delta_encoded and shared and handles:
            raw, at = _varint(block, at)
            previous = handles[-1]
            handles.append((previous[0] + previous[1] + TRAILER, previous[1] + ((raw >> 1) ^ -(raw & 1))))
        else:
            handle, at = _handle(block, at)
            if first_key:
                size, at = _varint(block, at)
                at += size
            handles.append(handle)
        if length is not None:
            at = start + length
    return handles


def _footer(data: bytes) -> tuple[tuple[int, int], tuple[int, int], int]:
    if len(data) < LEGACY_FOOTER_LENGTH:
        msg = f"{len(data)} bytes is too short for an SST"
        raise SstError(msg)
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic == LEGACY_MAGIC:
        at, version = len(data) - LEGACY_FOOTER_LENGTH, 0
    elif magic == BLOCK_MAGIC:
        if len(data) < FOOTER_LENGTH:
            msg = "the file is too short for its footer"
            raise SstError(msg)
        (version,) = struct.unpack_from("<I", data, len(data) - 12)
        at = len(data) - FOOTER_LENGTH + 1  # after the checksum type
    else:
        msg = "it does not end with RocksDB's block-based table magic number: not an SST, or truncated"
        raise SstError(msg)
    metaindex, at = _handle(data, at)
    index, _ = _handle(data, at)
    return metaindex, index, version


def _meta(data: bytes, metaindex: tuple[int, int]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The metaindex (meta block name -> handle bytes) and the table properties."""
    meta = {name.decode("utf-8", "replace"): value for name, value in _entries(_block(data, metaindex))}
    properties: dict[str, bytes] = {}
    if "rocksdb.properties" in meta:
        handle, _ = _handle(meta["rocksdb.properties"], 0)
        properties = {k.decode("utf-8", "replace"): v for k, v in _entries(_block(data, handle))}
    return meta, properties


def read_sst(data: bytes) -> Iterator[tuple[bytes, int, int, bytes]]:
    """Every entry of an SST file: (user key, sequence number, type, value)."""
    metaindex, index, _version = _footer(data)
    meta, properties = _meta(data, metaindex)
    index_type = properties.get("rocksdb.block.based.table.index.type", b"")
    kind = struct.unpack("<I", index_type[:4])[0] if len(index_type) >= 4 else 0
    if kind == TWO_LEVEL_INDEX:
        msg = "SSTs with a partitioned (two-level) index are not supported"
        raise SstError(msg)
    for name in ("rocksdb.range_del", "rocksdb.range_del2"):
        if name in meta and any(True for _ in _entries(_block(data, _handle(meta[name], 0)[0]))):
            msg = "SSTs with range deletions are not supported"
            raise SstError(msg)
    delta = properties.get("rocksdb.index.value.is.delta.encoded", b"")
    delta_encoded = bool(delta) and _varint(delta, 0)[0] != 0
    for handle in _index_handles(_block(data, index), delta_encoded, kind == INDEX_WITH_FIRST_KEY):
        for key, value in _entries(_block(data, handle)):
            if len(key) < 8:
                msg = "an internal key is shorter than its 8-byte trailer"
                raise SstError(msg)
            (trailer,) = struct.unpack_from("<Q", key, len(key) - 8)
            entry_type = trailer & 0xFF
            if entry_type not in KNOWN_TYPES:
                msg = f"an entry of RocksDB type {entry_type:#x} is not supported"
                raise SstError(msg)
            yield key[:-8], trailer >> 8, entry_type, value


def merge_snapshot(files: list[bytes], delimiter: bytes = b",") -> dict[bytes, bytes]:
    """The rows of a RocksDB snapshot made of these SSTs, as RocksDB reads them: per user key, from the highest
    sequence number down, merge operands gather until a value (their base) or a deletion (none); the row is the
    base and the operands, oldest first, joined by the merge operator's delimiter ("," for Spark's
    StringAppendOperator, merge operator version 1; none from version 2 on)."""
    found: dict[bytes, dict[int, tuple[int, bytes]]] = {}
    for data in files:
        for key, sequence, entry_type, value in read_sst(data):
            versions = found.setdefault(key, {})
            seen = versions.get(sequence)
            if seen is not None and seen[0] != entry_type:
                msg = "one key has two entries of the same sequence number"
                raise SstError(msg)
            versions[sequence] = (entry_type, value)
    rows = {}
    for key, versions in found.items():
        operands: list[bytes] = []
        base: bytes | None = None
        for sequence in sorted(versions, reverse=True):
            entry_type, value = versions[sequence]
            if entry_type == MERGE:
                operands.append(value)
                continue
            base = value if entry_type == VALUE else None
            break
        if base is None and not operands:
            continue  # deleted
        rows[key] = delimiter.join(([base] if base is not None else []) + operands[::-1])
    return rows
