"""Spark's state schema files: the key and value schema of each store (v2) or column family (v3).

v1 (Spark 3.0): writeUTF("v1") and the key and value schema JSON, one writeUTF each.
v2 (`state/<op>/0/[<store>/]_metadata/schema`, aggregations, deduplication, joins, sessions): Java's
writeUTF("v2"), then the key and the value schema JSON, each as an int chunk count and writeUTF chunks.
v3 (`state/<op>/_stateSchema/<store>/<batch>_<uuid>`, transformWithState): writeUTF("v3"), an int count of
column families, then per family its name, and for key, value, key encoder and user key: a short schema id
(key and value only) and the JSON in chunks. Pure parsing, no Spark.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.layout import STATE, schema_folder

# transformWithState's registered timers: one key per timer in the keyToTimestamp family of its time mode.
TIMER_FAMILIES = ("$procTimers_keyToTimestamp", "$eventTimers_keyToTimestamp")


@dataclass(frozen=True)
class Field:
    """One field of a Spark struct: name, type (a nested struct's fields in `fields`), nullability, metadata."""

    name: str
    type: str  # Spark's simple name: "string", "long", "timestamp", "struct", "array<...>" as JSON text
    nullable: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    fields: tuple[Field, ...] = ()  # for structs
    raw: Any = None  # the type JSON as Spark wrote it


def struct_fields(schema: dict[str, Any]) -> tuple[Field, ...]:
    """The fields of a Spark StructType JSON object."""
    out = []
    for entry in schema.get("fields") or []:
        kind = entry.get("type")
        if isinstance(kind, dict) and kind.get("type") == "struct":
            out.append(Field(entry["name"], "struct", bool(entry.get("nullable", True)), entry.get("metadata") or {},
                             struct_fields(kind), kind))  # fmt: skip
        else:
            name = kind if isinstance(kind, str) else json.dumps(kind, sort_keys=True)
            out.append(Field(entry["name"], name, bool(entry.get("nullable", True)), entry.get("metadata") or {},
                             (), kind))  # fmt: skip
    return tuple(out)


def type_signature(fields: tuple[Field, ...]) -> str:
    """The types of a struct without names, nullability or metadata: what Spark compares between restarts."""
    parts = []
    for f in fields:
        parts.append(f"struct<{type_signature(f.fields)}>" if f.type == "struct" else f.type)
    return ",".join(parts)


def names(fields: tuple[Field, ...]) -> list[str]:
    """Top-level field names."""
    return [f.name for f in fields]


@dataclass(frozen=True)
class ColumnFamilySchema:
    """One store (v2) or column family (v3): key and value schema, key encoder."""

    name: str
    key: tuple[Field, ...]
    value: tuple[Field, ...]
    encoder: dict[str, Any] = field(default_factory=dict)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            msg = "schema file ends early"
            raise ValueError(msg)
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def short(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def utf(self) -> str:
        size = struct.unpack(">H", self.take(2))[0]
        return self.take(size).decode("utf-8", errors="replace")  # Java's modified UTF-8: same for JSON text

    def chunks(self) -> str:
        count = self.int()
        if count < 0 or count > 1 << 16:
            msg = f"bad chunk count {count}"
            raise ValueError(msg)
        return "".join(self.utf() for _ in range(count))


def _json(text: str) -> dict[str, Any]:
    text = text.strip()
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def parse_schema_file(data: bytes) -> list[ColumnFamilySchema]:
    """Every column family a v2 or v3 schema file lists (a v2 file lists one, named 'default')."""
    reader = _Reader(data)
    version = reader.utf()
    if version == "v1":  # Spark 3.0: the two schemas as one writeUTF each
        key, value = _json(reader.utf()), _json(reader.utf())
        return [ColumnFamilySchema("default", struct_fields(key), struct_fields(value))]
    if version == "v2":
        key, value = _json(reader.chunks()), _json(reader.chunks())
        return [ColumnFamilySchema("default", struct_fields(key), struct_fields(value))]
    if version != "v3":
        msg = f"unknown state schema version {version!r}"
        raise ValueError(msg)
    after_version = reader.at
    try:
        return _v3_families(reader, schema_ids=True)
    except (ValueError, struct.error) as with_ids:
        # Spark's pre-release 4.0.0 builds (Spark's own checkpoint-version-4.0.0-tws fixtures) wrote v3 without
        # the short schema id before each key and value schema (SPARK-50714 added it before the 4.0.0 release).
        reader.at = after_version
        try:
            return _v3_families(reader, schema_ids=False)
        except (ValueError, struct.error):
            raise with_ids from None


def with_schema_ids(data: bytes) -> bytes | None:
    """A v3 schema file of Spark's pre-release 4.0.0 layout (no schema ids) in the layout every release reads
    (a short id 0 before each key and value schema), chunks kept byte for byte; None when it is not that layout."""
    reader = _Reader(data)
    try:
        if reader.utf() != "v3":
            return None
        start = reader.at
        _v3_families(reader, schema_ids=True)
    except (ValueError, struct.error):
        pass
    else:
        return None  # already the release layout
    reader.at = start
    out = [data[:start]]
    try:
        count = reader.int()
        out.append(struct.pack(">i", count))
        for _ in range(count):
            begin = reader.at
            reader.utf()
            out.append(data[begin : reader.at])
            for index in range(4):  # key, value, key encoder, user key
                begin = reader.at
                reader.chunks()
                out.append((struct.pack(">h", 0) if index < 2 else b"") + data[begin : reader.at])
    except (ValueError, struct.error):
        return None
    return b"".join(out) if reader.at == len(data) else None


def _v3_families(reader: _Reader, *, schema_ids: bool) -> list[ColumnFamilySchema]:
    families = []
    for _ in range(reader.int()):
        name = reader.utf()
        if schema_ids:
            reader.short()
        key = _json(reader.chunks())
        if schema_ids:
            reader.short()
        value = _json(reader.chunks())
        encoder = _json(reader.chunks())
        reader.chunks()  # the user key schema of map state; in the key schema too
        families.append(ColumnFamilySchema(name, struct_fields(key), struct_fields(value), encoder))
    if reader.at != len(reader.data):
        msg = f"{len(reader.data) - reader.at} bytes after the last column family"
        raise ValueError(msg)
    return families


def store_schemas(checkpoint: Checkpoint, operator_id: int, store: str = "default") -> list[ColumnFamilySchema]:
    """The newest schema of one store: its v3 file under _stateSchema, else the v2 file of partition 0."""
    folder = schema_folder(operator_id, store)
    listing = checkpoint.store.list_dir(folder)
    candidates = sorted(
        (n for n, _ in (listing.files if listing else []) if not n.endswith(".crc") and not n.startswith(".")),
        key=lambda n: int(n.split("_", 1)[0]) if n.split("_", 1)[0].isdigit() else -1,
    )
    if candidates:
        rel = f"{folder}/{candidates[-1]}"
    else:
        sub = "" if store == "default" else f"/{store}"
        rel = f"{STATE}/{operator_id}/0{sub}/_metadata/schema"
    data = checkpoint.store.read_bytes(rel)
    if data is None:
        return []
    try:
        return parse_schema_file(data)
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        msg = f"{checkpoint.store.uri(rel)} is not a readable state schema file ({exc})"
        raise ValueError(msg) from exc


def keyless_operator(checkpoint: Checkpoint, operator_id: int, operator_name: str | None = None) -> bool:
    """True when an operator's state key cannot tell rows apart: no columns (an aggregation without grouping
    keys) or only null-typed ones (a global `limit`: StreamingGlobalLimitExec keys its one count by a NullType).

    Spark plans such an operator with an AllTuples distribution: one partition, so its state lives in
    `state/<op>/0` alone whatever the recorded partition count (operator metadata and spark.sql.shuffle.partitions
    both still say N). Without a readable schema file, Spark's operator name for a global limit decides.
    """
    try:
        schemas = store_schemas(checkpoint, operator_id)
    except ValueError:
        schemas = []
    if schemas:
        return all(f.type in ("void", "null") for f in schemas[0].key)
    return operator_name == "globalLimit"
