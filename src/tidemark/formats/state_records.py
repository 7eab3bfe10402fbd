"""The records inside state files, read without Spark: HDFS-backed deltas and snapshots, RocksDB changelogs.

Read off Spark's `HDFSBackedStateStoreProvider` (writeUpdateToDeltaFile, writeRemoveToDeltaFile,
writeSnapshotFile) and `StateStoreChangelogWriterV1..V4`, inside the codec stream (formats/codec.py), through
Java's DataOutputStream (big-endian):
- HDFS `<v>.delta` and RocksDB changelog v1: per record an int key size, the key bytes, an int value size and the
  value bytes; a removal has value size -1 and no value; the file ends with an int -1.
- HDFS `<v>.snapshot`: the same without removals.
- changelog v2 (Spark 4.0, column families): writeUTF("v2"), then per record a type byte (0x01 put, 0x10 delete,
  0x11 merge), an int key size, the key, an int value size (-1 for a delete) and the value; 0x00 ends the file.
- changelog v3 / v4 (checkpoint format v2): writeUTF("v3"/"v4") and writeUTF(lineage JSON), then v1 / v2 records.
Keys and values are UnsafeRow bytes (RocksDB adds its own encoding bytes in front, formats/unsafe_row.py).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from tidemark.compat import StrEnum
from tidemark.formats.codec import Codec, CodecError, decompress
from tidemark.formats.layout import FileKind


class RecordKind(StrEnum):
    """What one record does to its key."""

    PUT = "put"
    DELETE = "delete"
    MERGE = "merge"  # RocksDB list state: the value is appended to the key's


class StateFileError(ValueError):
    """A state file's bytes are not what Spark writes (empty, truncated, garbage)."""


@dataclass(frozen=True)
class StateFile:
    """One state file decoded: its codec, changelog format version and lineage, and its records."""

    codec: Codec
    format_version: int  # 1 for HDFS files and changelog v1
    lineage: tuple[tuple[int, str], ...]  # changelog v3/v4: (version, unique id) back to the snapshot
    records: tuple[tuple[RecordKind, bytes, bytes | None], ...]


_TYPES = {0x01: RecordKind.PUT, 0x10: RecordKind.DELETE, 0x11: RecordKind.MERGE}


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def read_int(self) -> int:
        if self.at + 4 > len(self.data):
            msg = f"the records stop at byte {self.at} of {len(self.data)} with no end marker: the file is truncated"
            raise StateFileError(msg)
        (value,) = struct.unpack_from(">i", self.data, self.at)
        self.at += 4
        return int(value)

    def read_byte(self) -> int:
        if self.at >= len(self.data):
            msg = f"the records stop at byte {self.at} with no end marker: the file is truncated"
            raise StateFileError(msg)
        value = self.data[self.at]
        self.at += 1
        return value

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            msg = f"a {size}-byte field at byte {self.at} runs past the end ({len(self.data)}): the file is truncated"
            raise StateFileError(msg)
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def utf(self) -> str | None:
        """Java's readUTF, or None (position unchanged) when the bytes there are not one starting with 'v'."""
        if self.at + 2 > len(self.data):
            return None
        (size,) = struct.unpack_from(">H", self.data, self.at)
        if self.at + 2 + size > len(self.data):
            return None
        try:
            text = self.data[self.at + 2 : self.at + 2 + size].decode("utf-8")
        except UnicodeDecodeError:
            return None
        self.at += 2 + size
        return text


def _v1_records(cursor: _Cursor, deletes: bool) -> Iterator[tuple[RecordKind, bytes, bytes | None]]:
    while True:
        key_size = cursor.read_int()
        if key_size == -1:
            return
        if key_size < 0:
            msg = f"a key size of {key_size} at byte {cursor.at - 4}: the file is corrupt"
            raise StateFileError(msg)
        key = cursor.take(key_size)
        value_size = cursor.read_int()
        if value_size < 0:
            if not deletes or value_size != -1:
                msg = f"a value size of {value_size} at byte {cursor.at - 4}: the file is corrupt"
                raise StateFileError(msg)
            yield RecordKind.DELETE, key, None
            continue
        yield RecordKind.PUT, key, cursor.take(value_size)


def _v2_records(cursor: _Cursor) -> Iterator[tuple[RecordKind, bytes, bytes | None]]:
    while True:
        code = cursor.read_byte()
        if code == 0x00:
            return
        kind = _TYPES.get(code)
        if kind is None:
            msg = f"an unknown record type {code:#04x} at byte {cursor.at - 1}: the file is corrupt"
            raise StateFileError(msg)
        key_size = cursor.read_int()
        if key_size < 0:
            msg = f"a key size of {key_size} at byte {cursor.at - 4}: the file is corrupt"
            raise StateFileError(msg)
        key = cursor.take(key_size)
        value_size = cursor.read_int()
        if kind is RecordKind.DELETE:
            if value_size != -1:
                msg = f"a delete record with value size {value_size} at byte {cursor.at - 4}: the file is corrupt"
                raise StateFileError(msg)
            yield kind, key, None
            continue
        if value_size < 0:
            msg = f"a value size of {value_size} at byte {cursor.at - 4}: the file is corrupt"
            raise StateFileError(msg)
        yield kind, key, cursor.take(value_size)


def _changelog_header(cursor: _Cursor) -> tuple[int, tuple[tuple[int, str], ...]]:
    """Spark's rule: a first writeUTF of 'v<n>' is the version, anything else means v1 (nothing consumed)."""
    start = cursor.at
    text = cursor.utf()
    if text is None or not text.startswith("v") or not text[1:].isdigit():
        cursor.at = start
        return 1, ()
    version = int(text[1:])
    if version not in (2, 3, 4):
        msg = f"changelog format v{version} is newer than tidemark knows (v1..v4)"
        raise StateFileError(msg)
    lineage: tuple[tuple[int, str], ...] = ()
    if version >= 3:
        raw = cursor.utf()
        try:
            items = json.loads(raw or "")
            lineage = tuple((int(i["version"]), str(i["checkpointUniqueId"])) for i in items)
        except (ValueError, TypeError, KeyError) as exc:
            msg = "the changelog's lineage line is not Spark's JSON"
            raise StateFileError(msg) from exc
    return version, lineage


def parse_state_file(data: bytes, kind: FileKind) -> StateFile:
    """Decode a whole `.delta`, `.snapshot` or `.changelog` file; StateFileError says what is wrong."""
    try:
        codec, raw = decompress(data)
    except CodecError as exc:
        raise StateFileError(str(exc)) from exc
    cursor = _Cursor(raw)
    version, lineage = (1, ()) if kind is not FileKind.CHANGELOG else _changelog_header(cursor)
    if version in (2, 4):
        records = tuple(_v2_records(cursor))
    else:
        records = tuple(_v1_records(cursor, deletes=kind is not FileKind.SNAPSHOT))
    if cursor.at != len(raw):
        msg = f"{len(raw) - cursor.at} bytes follow the end marker: the file is corrupt"
        raise StateFileError(msg)
    return StateFile(codec, version, lineage, records)
