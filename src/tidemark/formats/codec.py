"""Spark's compression codecs as they frame state files: detect, check and decompress, without Spark.

HDFS-backed state files (`<v>.delta`, `<v>.snapshot`) and RocksDB changelogs (`<v>.changelog`) are written
through `CompressionCodec.compressedOutputStream` of the codec `spark.sql.streaming.stateStore.compression.codec`
names (recorded in offsets/<b> since Spark 3.1; before that `spark.io.compression.codec`; default lz4):
- lz4: lz4-java's `LZ4BlockOutputStream`: blocks of `LZ4Block` (8 bytes), a token (method 0x10 raw / 0x20 lz4 |
  level), compressed and decompressed length and an xxhash32 checksum (little-endian ints), then the data; the
  stream ends with an empty raw block. The checksum is not verified here.
- snappy: snappy-java's `SnappyOutputStream`: `\\x82SNAPPY\\x00`, two big-endian version ints, then chunks of a
  big-endian length and raw snappy data.
- zstd: zstd-jni's stream: standard zstd frames.
- lzf: ning-compress's `LZFOutputStream`: chunks of `ZV`, a type byte and big-endian lengths.
The codec is read off the file's first bytes rather than trusted from the conf, so a file whose codec differs
from the recorded one is still read (and reported).
"""

from __future__ import annotations

import struct
from typing import Any

from tidemark.compat import StrEnum

LZ4_MAGIC = b"LZ4Block"
LZ4_HEADER = 21  # magic, token, compressed length, decompressed length, checksum
LZ4_RAW = 0x10
LZ4_COMPRESSED = 0x20
SNAPPY_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_HEADER = 16
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LZF_MAGIC = b"ZV"
# lz4-java refuses blocks above 32 MB; snappy-java's default block is 32 KB. Anything larger is not a block.
MAX_BLOCK = 1 << 25


class Codec(StrEnum):
    """A compression codec Spark can write state files with."""

    LZ4 = "lz4"
    SNAPPY = "snappy"
    ZSTD = "zstd"
    LZF = "lzf"


class CodecError(ValueError):
    """The bytes are not a complete stream of the codec they start like (empty, truncated, garbage)."""


def detect(head: bytes) -> Codec:
    """The codec a state file was written with, from its first bytes; CodecError when it is none of them."""
    if not head:
        msg = "the file is empty (a state file holds at least its codec's end marker)"
        raise CodecError(msg)
    if head.startswith(LZ4_MAGIC):
        return Codec.LZ4
    if head.startswith(SNAPPY_MAGIC):
        return Codec.SNAPPY
    if head.startswith(ZSTD_MAGIC):
        return Codec.ZSTD
    if head.startswith(LZF_MAGIC):
        return Codec.LZF
    msg = f"it starts with {head[:8]!r}, the header of none of Spark's codecs (lz4, snappy, zstd, lzf)"
    raise CodecError(msg)


def check_ends(head: bytes, tail: bytes) -> Codec:
    """A cheap completeness check from the first and last bytes of a file (the whole file when short).

    lz4 streams end with an empty raw block, so a truncated lz4 file is caught here; the other codecs have no
    end marker and need `decompress` for that.
    """
    codec = detect(head)
    if codec is Codec.LZ4:
        end = tail[-LZ4_HEADER:]
        if len(end) < LZ4_HEADER or not end.startswith(LZ4_MAGIC) or end[8] & 0xF0 != LZ4_RAW or any(end[9:]):
            msg = "its lz4 stream has no end block: the file is truncated"
            raise CodecError(msg)
    elif codec is Codec.SNAPPY and len(head) < SNAPPY_HEADER:
        msg = "its snappy header is cut short: the file is truncated"
        raise CodecError(msg)
    return codec


def _pyarrow_codec(name: str) -> Any:
    import pyarrow as pa

    return pa.Codec(name)


def _lz4(data: bytes) -> bytes:
    codec: Any = None
    out = bytearray()
    at = 0
    ended = False
    while at < len(data):
        header = data[at : at + LZ4_HEADER]
        if len(header) < LZ4_HEADER or not header.startswith(LZ4_MAGIC):
            msg = f"bad lz4 block header at byte {at}" if header else f"the lz4 stream stops at byte {at}"
            raise CodecError(msg)
        method = header[8] & 0xF0
        compressed, decompressed = struct.unpack_from("<ii", header, 9)
        if (
            method not in (LZ4_RAW, LZ4_COMPRESSED)
            or not 0 <= compressed <= MAX_BLOCK
            or not 0 <= decompressed <= MAX_BLOCK
        ):
            msg = f"bad lz4 block header at byte {at}"
            raise CodecError(msg)
        at += LZ4_HEADER
        if compressed == 0 and decompressed == 0:
            ended = True  # the end block; lz4-java reads on if another stream follows
            continue
        ended = False
        block = data[at : at + compressed]
        if len(block) < compressed:
            msg = f"the lz4 block at byte {at - LZ4_HEADER} is cut short: the file is truncated"
            raise CodecError(msg)
        at += compressed
        if method == LZ4_RAW:
            out += block
            continue
        codec = codec or _pyarrow_codec("lz4_raw")
        try:
            out += codec.decompress(block, decompressed_size=decompressed).to_pybytes()
        except Exception as exc:
            msg = f"the lz4 block at byte {at - compressed - LZ4_HEADER} does not decompress ({exc})"
            raise CodecError(msg) from exc
    if not ended:
        msg = "its lz4 stream has no end block: the file is truncated"
        raise CodecError(msg)
    return bytes(out)


def _varint(data: bytes) -> int:
    value = shift = 0
    for byte in data[:5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    msg = "bad snappy length"
    raise CodecError(msg)


def _snappy(data: bytes) -> bytes:
    codec: Any = None
    out = bytearray()
    at = 0
    while at < len(data):
        if data.startswith(SNAPPY_MAGIC, at):  # a stream header (snappy-java reads concatenated streams)
            if len(data) - at < SNAPPY_HEADER:
                msg = "its snappy header is cut short: the file is truncated"
                raise CodecError(msg)
            at += SNAPPY_HEADER
            continue
        if len(data) - at < 4:
            msg = f"the snappy stream stops inside a chunk length at byte {at}"
            raise CodecError(msg)
        (size,) = struct.unpack_from(">i", data, at)
        chunk = data[at + 4 : at + 4 + size]
        if not 0 < size <= MAX_BLOCK or len(chunk) < size:
            msg = f"the snappy chunk at byte {at} is cut short or corrupt"
            raise CodecError(msg)
        at += 4 + size
        codec = codec or _pyarrow_codec("snappy")
        try:
            out += codec.decompress(chunk, decompressed_size=_varint(chunk)).to_pybytes()
        except CodecError:
            raise
        except Exception as exc:
            msg = f"the snappy chunk at byte {at - size - 4} does not decompress ({exc})"
            raise CodecError(msg) from exc
    return bytes(out)


def _zstd(data: bytes) -> bytes:
    import pyarrow as pa

    try:
        with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
            return bytes(stream.read())
    except Exception as exc:
        msg = f"its zstd stream does not decompress ({exc}): the file is truncated or corrupt"
        raise CodecError(msg) from exc


def _lzf_chunk(src: bytes, size: int) -> bytes:
    out = bytearray()
    at = 0
    while at < len(src):
        control = src[at]
        at += 1
        if control < 32:  # a literal run of control + 1 bytes
            out += src[at : at + control + 1]
            at += control + 1
            continue
        length = control >> 5
        if length == 7:
            length += src[at]
            at += 1
        back = ((control & 0x1F) << 8) + src[at] + 1
        at += 1
        start = len(out) - back
        if start < 0:
            msg = "bad lzf back reference"
            raise CodecError(msg)
        for i in range(length + 2):  # overlapping copies repeat bytes, so byte by byte
            out.append(out[start + i])
    if len(out) != size:
        msg = f"an lzf chunk decompressed to {len(out)} bytes, not {size}"
        raise CodecError(msg)
    return bytes(out)


def _lzf(data: bytes) -> bytes:
    out = bytearray()
    at = 0
    while at < len(data):
        if not data.startswith(LZF_MAGIC, at) or len(data) - at < 5:
            msg = f"bad lzf chunk header at byte {at}"
            raise CodecError(msg)
        kind = data[at + 2]
        if kind == 0:
            (size,) = struct.unpack_from(">H", data, at + 3)
            chunk = data[at + 5 : at + 5 + size]
            if len(chunk) < size:
                msg = "the lzf stream is cut short: the file is truncated"
                raise CodecError(msg)
            out += chunk
            at += 5 + size
        elif kind == 1 and len(data) - at >= 7:
            size, full = struct.unpack_from(">HH", data, at + 3)
            chunk = data[at + 7 : at + 7 + size]
            if len(chunk) < size:
                msg = "the lzf stream is cut short: the file is truncated"
                raise CodecError(msg)
            try:
                out += _lzf_chunk(chunk, full)
            except IndexError as exc:
                msg = "an lzf chunk is corrupt"
                raise CodecError(msg) from exc
            at += 7 + size
        else:
            msg = f"bad lzf chunk type {kind} at byte {at}"
            raise CodecError(msg)
    return bytes(out)


_DECODERS = {Codec.LZ4: _lz4, Codec.SNAPPY: _snappy, Codec.ZSTD: _zstd, Codec.LZF: _lzf}


def decompress(data: bytes) -> tuple[Codec, bytes]:
    """The codec of a whole state file and its decompressed bytes; CodecError when it is not complete."""
    codec = detect(data[:16])
    return codec, _DECODERS[codec](data)
