"""A stream-stream join's state stores, as each join state format of Spark lays them out.

Formats 1 and 2: four stores, each a folder of its own under `state/<op>/<partition>/` (JOIN_STORES). Format 3
(`spark.sql.streaming.join.stateFormatVersion=3`): the same four as column families of the one store `default`;
the operator metadata says `{"useVirtualColumnFamilies":true}`. Format 4 (Spark 4.2 behind
`spark.sql.streaming.join.stateFormatV4.enabled`, 4.3): four other column families of `default` (JOIN_V4_STORES),
per side `keyWithTsToValues` (join key and event time -> the side's rows) and `tsWithKey` (event time and join key
-> nothing: the index eviction walks; RocksDB's row count leaves it out as internal). Spark's reader takes a family's
name as `storeName`, as it took a folder's (4.1 reads format 3; format 4 needs 4.2).

Both format-4 families keep several values per key. RocksDB's merge operator appends each value as a 4-byte
little-endian length and its bytes (a version byte and an UnsafeRow), separated by ','; Spark's reader returns one
row per value. Their keys carry the event time beside the UnsafeRow as 8 big-endian bytes with the sign bit flipped
(so that byte order is time order): after the row for `TimestampAsPostfixKeyStateEncoderSpec`, before the row's
version byte for `TimestampAsPrefixKeyStateEncoderSpec`. The key schema Spark records names that time
`__event_time` (a long, microseconds), last.
"""

from __future__ import annotations

import json
import struct

from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.state_schema import store_schemas

JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
JOIN_V4_STORES = ("left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey")
MULTI_VALUED = frozenset(JOIN_V4_STORES)
# Spark 4.2 creates the time index as an internal column family, which RocksDB's row count leaves out; a writer must
# create it the same way. (4.2.1's spark-sql bytecode: TsWithKeyTypeStore calls createColFamilyIfAbsent with
# useMultipleValuesPerKey and isInternal true, KeyWithTsToValuesStore with multiple values only; the recorded RocksDB
# checkpoints' columnFamilyTypeMap says true for the two tsWithKey families.)
INTERNAL_FAMILIES = frozenset(("left-tsWithKey", "right-tsWithKey"))
EVENT_TIME = "__event_time"
TIME_POSTFIX = "TimestampAsPostfixKeyStateEncoderSpec"
TIME_PREFIX = "TimestampAsPrefixKeyStateEncoderSpec"
_SEPARATOR = ord(",")
_SIGN = 1 << 63


def join_families(checkpoint: Checkpoint, operator_id: int, properties: str | None) -> tuple[str, ...]:
    """The join stores an operator keeps as column families of its one store `default`, or () when it has none.

    The names come from the store's schema file (v3: one entry per family) where it is readable, else format 3's
    four (a format-4 checkpoint always has its schema file: Spark 4.2+ writes it).
    """
    try:
        props = json.loads(properties) if properties else {}
    except json.JSONDecodeError:
        return ()
    if not isinstance(props, dict) or props.get("useVirtualColumnFamilies") is not True:
        return ()
    try:
        recorded = tuple(f.name for f in store_schemas(checkpoint, operator_id))
    except ValueError:
        recorded = ()
    known = (*JOIN_STORES, *JOIN_V4_STORES)
    return tuple(n for n in recorded if n in known) or JOIN_STORES


MERGE_OPERATOR_KEY = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"


def merge_delimiter(conf: dict[str, str]) -> bytes:
    """What Spark's RocksDB merge operator puts between two values of one key (list state, join format 4): ","
    in version 1 (StringAppendOperator, every Spark up to 4.1), nothing from version 2 (4.2+'s default, recorded in
    the offsets conf): the values are length-prefixed either way."""
    return b"," if conf.get(MERGE_OPERATOR_KEY, "1") == "1" else b""


def values(value: bytes, delimiter: bytes = b",") -> list[bytes]:
    """The values RocksDB's merge operator joined into one (each: its 4-byte little-endian length, then the
    encoded value); ValueError when the bytes are not that framing."""
    found: list[bytes] = []
    at = 0
    while True:
        if at + 4 > len(value):
            msg = f"a multi-value entry ends inside a length at byte {at} of {len(value)}"
            raise ValueError(msg)
        (size,) = struct.unpack_from("<i", value, at)
        end = at + 4 + size
        if size < 1 or end > len(value):
            msg = f"a multi-value entry's length {size} at byte {at} runs past its {len(value)} bytes"
            raise ValueError(msg)
        found.append(value[at + 4 : end])
        if end == len(value):
            return found
        if not delimiter:
            at = end
            continue
        if value[end] != _SEPARATOR:
            msg = f"a multi-value entry has byte {value[end]:#04x} where ',' separates two values (byte {end})"
            raise ValueError(msg)
        at = end + 1


def split_key(key: bytes, encoder: str | None) -> tuple[bytes, int | None]:
    """A family's key without its 2-byte family id: (the UnsafeRow, the event time in microseconds or None).

    Keys without a time carry a version byte before the row (as every column-family key does).
    """
    if encoder in (TIME_POSTFIX, TIME_PREFIX) and len(key) < 9:
        msg = f"a key of {len(key)} bytes cannot hold a version byte and an 8-byte time ({encoder})"
        raise ValueError(msg)
    if encoder == TIME_POSTFIX:
        return key[1:-8], int.from_bytes(key[-8:], "big") - _SIGN
    if encoder == TIME_PREFIX:
        return key[9:], int.from_bytes(key[:8], "big") - _SIGN
    return key[1:], None
