"""The byte formats a Spark 2.x HDFS-backed checkpoint is made of, written (and read back) in plain Python.

Each piece follows the source it names (Spark 2.4.8's and lz4-java 1.4.0's `-sources` jars from Maven Central):

- UnsafeRow (spark-catalyst `UnsafeRow`/`UnsafeRowWriter`): a null bitset of 8-byte words, one 8-byte slot per
  field (fixed-width values in place, zero-filled; variable-width ones as `offset << 32 | size`), then the
  variable-width data, each padded with zeros to a multiple of 8. A struct is a nested UnsafeRow in that region.
- HDFSBackedStateStoreProvider delta/snapshot stream: per record `int keySize, key bytes, int valueSize, value
  bytes` (a removal: `valueSize = -1`, no value), then `int -1`; big-endian ints (DataOutputStream), the whole
  stream through `LZ4CompressionCodec` (spark-core), i.e. lz4-java's `LZ4BlockOutputStream` with its 32k block.
- LZ4BlockOutputStream framing: per block the magic `LZ4Block`, one token byte `method | level` (RAW = 0x10,
  LZ4 = 0x20; level = ceil(log2(blockSize)) - 10 = 5 for 32k), little-endian compressed length, original length
  and checksum: xxhash32 of the original bytes, seed 0x9747b28c, masked with 0x0FFFFFFF (lz4-java's
  `StreamingXXHash32.asChecksum()` keeps 28 bits). The stream ends with an empty RAW block, all three ints 0.
  RAW blocks (stored, not compressed) are what the writer emits itself for data that does not compress.
- Hadoop's local checksum files (`ChecksumFileSystem`): `.<name>.crc` = `crc\\0`, big-endian int 512, then the
  big-endian CRC-32 of each 512-byte chunk.

Only the standard library, so the synthesizer runs on any Python.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

LZ4_MAGIC = b"LZ4Block"
LZ4_RAW = 0x10
LZ4_COMPRESSED = 0x20
LZ4_LEVEL_32K = 5
LZ4_SEED = 0x9747B28C
CRC_BYTES_PER_CHECKSUM = 512

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def xxhash32(data: bytes, seed: int) -> int:
    """XXH32, as lz4-java's StreamingXXHash32 computes it over a whole buffer."""
    length, offset = len(data), 0
    if length >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while offset <= length - 16:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, offset)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                offset += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + length) & _M32
    while offset <= length - 4:
        (word,) = struct.unpack_from("<I", data, offset)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        offset += 4
    while offset < length:
        h = (_rotl((h + data[offset] * _P5) & _M32, 11) * _P1) & _M32
        offset += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


def lz4_checksum(data: bytes) -> int:
    return xxhash32(data, LZ4_SEED) & 0x0FFFFFFF


def lz4_block_stream(data: bytes, block_size: int = 32 * 1024) -> bytes:
    """The bytes LZ4BlockOutputStream writes for `data`, every block stored RAW, then the end block."""
    out = bytearray()
    for start in range(0, len(data), block_size):
        block = data[start : start + block_size]
        out += LZ4_MAGIC + bytes([LZ4_RAW | LZ4_LEVEL_32K])
        out += struct.pack("<iii", len(block), len(block), lz4_checksum(block)) + block
    out += LZ4_MAGIC + bytes([LZ4_RAW | LZ4_LEVEL_32K]) + struct.pack("<iii", 0, 0, 0)
    return bytes(out)


def _lz4_block_decompress(src: bytes, size: int) -> bytes:
    out = bytearray()
    i = 0
    while i < len(src):
        token = src[i]
        i += 1
        literals = token >> 4
        if literals == 15:
            while True:
                extra = src[i]
                i += 1
                literals += extra
                if extra != 255:
                    break
        out += src[i : i + literals]
        i += literals
        if i >= len(src):
            break
        (distance,) = struct.unpack_from("<H", src, i)
        i += 2
        match = (token & 15) + 4
        if token & 15 == 15:
            while True:
                extra = src[i]
                i += 1
                match += extra
                if extra != 255:
                    break
        for _ in range(match):
            out.append(out[-distance])
    if len(out) != size:
        msg = f"lz4 block decoded to {len(out)} bytes, header says {size}"
        raise ValueError(msg)
    return bytes(out)


def read_lz4_block_stream(stream: bytes) -> bytes:
    """Decode LZ4BlockOutputStream framing (RAW and LZ4 blocks), checking every block's checksum."""
    out = bytearray()
    offset = 0
    while offset < len(stream):
        if stream[offset : offset + 8] != LZ4_MAGIC:
            msg = f"no LZ4Block magic at byte {offset}"
            raise ValueError(msg)
        method = stream[offset + 8] & 0xF0
        compressed, original, check = struct.unpack_from("<iii", stream, offset + 9)
        offset += 21
        if original == 0:
            continue
        payload = stream[offset : offset + compressed]
        offset += compressed
        block = payload if method == LZ4_RAW else _lz4_block_decompress(payload, original)
        if lz4_checksum(block) != check:
            msg = f"checksum mismatch in the block before byte {offset}"
            raise ValueError(msg)
        out += block
    return bytes(out)


# ---------------------------------------------------------------- UnsafeRow


def _pad8(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


def unsafe_row(fields: list[tuple[str, Any]]) -> bytes:
    """An UnsafeRow of (type, value) fields; types: long, timestamp (micros), string, null, struct (a list)."""
    bitset_words = (len(fields) + 63) // 64
    header = bytearray(bitset_words * 8 + 8 * len(fields))
    variable = bytearray()
    fixed_start = bitset_words * 8
    for ordinal, (kind, value) in enumerate(fields):
        slot = fixed_start + 8 * ordinal
        if value is None or kind == "null":
            header[ordinal // 8] |= 1 << (ordinal % 8)
            continue
        if kind in ("long", "timestamp"):
            struct.pack_into("<q", header, slot, value)
            continue
        data = value.encode("utf-8") if kind == "string" else unsafe_row(value)
        offset = len(header) + len(variable)
        struct.pack_into("<Q", header, slot, (offset << 32) | len(data))
        variable += _pad8(data)
    return bytes(header) + bytes(variable)


def read_unsafe_row(data: bytes, kinds: list[Any]) -> list[Any]:
    """The inverse of unsafe_row for the same kinds (a struct's kinds as a nested list)."""
    bitset_words = (len(kinds) + 63) // 64
    values: list[Any] = []
    for ordinal, kind in enumerate(kinds):
        if data[ordinal // 8] >> (ordinal % 8) & 1:
            values.append(None)
            continue
        slot = bitset_words * 8 + 8 * ordinal
        if kind in ("long", "timestamp"):
            values.append(struct.unpack_from("<q", data, slot)[0])
            continue
        (word,) = struct.unpack_from("<Q", data, slot)
        offset, size = word >> 32, word & 0xFFFFFFFF
        chunk = data[offset : offset + size]
        values.append(chunk.decode("utf-8") if kind == "string" else read_unsafe_row(chunk, kind))
    return values


# ---------------------------------------------------------------- HDFS-backed state files and checksums


def state_file(records: list[tuple[bytes, bytes | None]]) -> bytes:
    """A .delta (or .snapshot) file: puts as (key, value), removals as (key, None), LZ4-framed."""
    body = bytearray()
    for key, value in records:
        body += struct.pack(">i", len(key)) + key
        body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    body += struct.pack(">i", -1)
    return lz4_block_stream(bytes(body))


def read_state_file(stream: bytes) -> list[tuple[bytes, bytes | None]]:
    body = read_lz4_block_stream(stream)
    records: list[tuple[bytes, bytes | None]] = []
    offset = 0
    while True:
        (key_size,) = struct.unpack_from(">i", body, offset)
        offset += 4
        if key_size == -1:
            return records
        key = body[offset : offset + key_size]
        offset += key_size
        (value_size,) = struct.unpack_from(">i", body, offset)
        offset += 4
        if value_size < 0:
            records.append((key, None))
            continue
        records.append((key, body[offset : offset + value_size]))
        offset += value_size


def hadoop_crc(data: bytes) -> bytes:
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + CRC_BYTES_PER_CHECKSUM]) & _M32)
        for i in range(0, len(data), CRC_BYTES_PER_CHECKSUM)
    )
    return b"crc\0" + struct.pack(">i", CRC_BYTES_PER_CHECKSUM) + sums


def write_with_crc(path: Path, data: bytes) -> None:
    """The file and its `.<name>.crc` sibling, as Hadoop's local file system leaves them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    (path.parent / f".{path.name}.crc").write_bytes(hadoop_crc(data))


# ---------------------------------------------------------------- Spark's shuffle partitioning


def _murmur_mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M32
    return (_rotl(k1, 15) * 0x1B873593) & _M32


def _murmur_mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def _murmur_fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & _M32
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & _M32
    return h1 ^ (h1 >> 16)


def murmur3_long(value: int, seed: int) -> int:
    """Spark's Murmur3_x86_32.hashLong (unsigned 32-bit result)."""
    value &= (1 << 64) - 1
    h1 = _murmur_mix_h1(seed, _murmur_mix_k1(value & _M32))
    h1 = _murmur_mix_h1(h1, _murmur_mix_k1(value >> 32))
    return _murmur_fmix(h1, 8)


def murmur3_bytes(data: bytes, seed: int) -> int:
    """Spark's Murmur3_x86_32.hashUnsafeBytes: 4-byte little-endian words, then each tail byte (signed) alone."""
    aligned = len(data) - len(data) % 4
    h1 = seed
    for offset in range(0, aligned, 4):
        (word,) = struct.unpack_from("<I", data, offset)
        h1 = _murmur_mix_h1(h1, _murmur_mix_k1(word))
    for byte in data[aligned:]:
        signed = byte - 256 if byte > 127 else byte
        h1 = _murmur_mix_h1(h1, _murmur_mix_k1(signed & _M32))
    return _murmur_fmix(h1, len(data))


def shuffle_partition(fields: list[tuple[str, Any]], partitions: int) -> int:
    """pmod(Murmur3Hash(fields, seed 42), partitions): HashPartitioning of the grouping/dedup keys."""
    seed = _hash_fields(fields, 42)
    signed = seed - (1 << 32) if seed >= 1 << 31 else seed
    return signed % partitions


def _hash_fields(fields: list[tuple[str, Any]], seed: int) -> int:
    for kind, value in fields:
        if value is None:
            continue
        if kind in ("long", "timestamp"):
            seed = murmur3_long(value, seed)
        elif kind == "string":
            seed = murmur3_bytes(value.encode("utf-8"), seed)
        else:
            seed = _hash_fields(value, seed)
    return seed
