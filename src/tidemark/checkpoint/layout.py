"""Names of things in a Spark checkpoint: file kinds, versions, log entries; pure parsing, no I/O."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, BinaryIO

OFFSETS = "offsets"
COMMITS = "commits"
SOURCES = "sources"
STATE = "state"
METADATA = "metadata"
TIDEMARK_DIR = "_tidemark"
SINK_LOG_DIR = "_spark_metadata"
SCHEMA_DIR = "_stateSchema"
# Folders below state/<op>/ and state/<op>/<partition>/ that are not named stores: the store's own
# RocksDB files (SSTs/, logs/), metadata and schema folders.
NON_STORE_FOLDERS = frozenset({"SSTs", "logs", "_metadata", SCHEMA_DIR})


class FileKind(StrEnum):
    """What a file in a state store folder is."""

    DELTA = "delta"
    SNAPSHOT = "snapshot"
    CHANGELOG = "changelog"
    ZIP = "zip"
    SST = "sst"
    CRC = "crc"
    OTHER = "other"


FILE_KINDS: tuple[FileKind, ...] = tuple(FileKind)
_VERSIONED = {
    "delta": FileKind.DELTA,
    "snapshot": FileKind.SNAPSHOT,
    "changelog": FileKind.CHANGELOG,
    "zip": FileKind.ZIP,
}
# A load starts from one of these and replays the others on top of it.
SNAPSHOT_KINDS = frozenset({FileKind.SNAPSHOT, FileKind.ZIP})
REPLAY_KINDS = frozenset({FileKind.DELTA, FileKind.CHANGELOG})


def classify(name: str) -> tuple[FileKind, int | None, str | None]:
    """Kind, state version and unique id (checkpoint format v2) of a state file name."""
    # Hadoop's ".x.crc", Spark 4.1's "x.crc" checksum files and their own ".x.crc.crc" all end so.
    if name.endswith(".crc"):
        return FileKind.CRC, None, None
    dot = name.rfind(".")
    if dot <= 0:
        return FileKind.OTHER, None, None
    kind = _VERSIONED.get(name[dot + 1 :])
    if kind is None:
        return (FileKind.SST if name.endswith(".sst") else FileKind.OTHER), None, None
    stem = name[:dot]
    cut = stem.find("_")
    number, unique_id = (stem, None) if cut < 0 else (stem[:cut], stem[cut + 1 :])
    if not number.isdigit():
        return FileKind.OTHER, None, None
    return kind, int(number), unique_id


def store_ids(rel: str) -> tuple[int, int, str] | None:
    """(operator, partition, store) of a store folder state/<op>/<partition>[/<store>], else None."""
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != STATE or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    rest = parts[3:]
    if len(rest) > 1 or (rest and rest[0] in NON_STORE_FOLDERS):
        return None
    return int(parts[1]), int(parts[2]), rest[0] if rest else "default"


def crc_companions(name: str) -> tuple[str, ...]:
    """Names of the checksum files Hadoop and Spark may write next to a file."""
    return (f".{name}.crc", f"{name}.crc", f".{name}.crc.crc")


def log_batch(name: str) -> int | None:
    """Batch id of an offsets/commits log file name, None for crc, temp and other files."""
    return int(name) if name.isdigit() else None


def sink_log_batch(name: str) -> tuple[int, bool] | None:
    """Batch id and is-compact of a `_spark_metadata` (or source log) file name."""
    if name.isdigit():
        return int(name), False
    if name.endswith(".compact") and name[: -len(".compact")].isdigit():
        return int(name[: -len(".compact")]), True
    return None


MAX_ZIP_METADATA_BYTES = 64 * 1024**2


def zip_references(data: bytes | BinaryIO) -> set[str]:
    """The SST and log file names a RocksDB snapshot zip lists in its metadata (shared files it needs).

    Takes the bytes or a seekable file (only the central directory and the metadata entry are read).
    """
    with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as archive:
        if archive.getinfo("metadata").file_size > MAX_ZIP_METADATA_BYTES:
            msg = "its metadata entry is too large to be RocksDB's"
            raise ValueError(msg)
        text = archive.read("metadata").decode()
    lines = [line for line in text.splitlines() if line.strip()]
    meta: dict[str, Any] = json.loads(lines[1] if lines[0].startswith("v") else lines[0])
    names = {str(f["dfsSstFileName"]) for f in meta.get("sstFiles", [])}
    names |= {str(f["dfsLogFileName"]) for f in meta.get("logFiles", [])}
    return names


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _object(line: str, what: str) -> dict[str, Any]:
    value = json.loads(line)
    if not isinstance(value, dict):
        msg = f"{what} is not a JSON object"
        raise ValueError(msg)
    return value


@dataclass(frozen=True)
class OffsetEntry:
    """One offsets/<batch> file: the batch Spark planned, with its watermark and source offsets."""

    batch: int
    watermark_ms: int
    timestamp_ms: int
    conf: dict[str, str]
    source_offsets: list[Any]

    @classmethod
    def parse(cls, batch: int, text: str) -> OffsetEntry:
        """Read the file's text: version line, batch metadata, then one line per source ("-" when none)."""
        lines = _lines(text)
        if len(lines) < 2 or not lines[0].startswith("v"):
            msg = f"offsets/{batch} does not look like a Spark offset log entry"
            raise ValueError(msg)
        meta = _object(lines[1], f"offsets/{batch} line 2")
        sources: list[Any] = []
        for line in lines[2:]:
            if line.strip() == "-":
                sources.append(None)
                continue
            try:
                sources.append(json.loads(line))
            except json.JSONDecodeError:
                sources.append(line)
        conf = meta.get("conf") or {}
        return cls(
            batch=batch,
            watermark_ms=int(meta.get("batchWatermarkMs", 0)),
            timestamp_ms=int(meta.get("batchTimestampMs", 0)),
            conf={str(k): str(v) for k, v in conf.items()},
            source_offsets=sources,
        )


@dataclass(frozen=True)
class CommitEntry:
    """One commits/<batch> file: the batch is done; v2 also names the state files it wrote."""

    batch: int
    log_version: int
    next_watermark_ms: int
    # operator id -> partition -> unique ids of that version's files (one per store); format v2 only.
    state_unique_ids: dict[int, list[list[str]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, batch: int, text: str) -> CommitEntry:
        """Read the file's text: "v1"/"v2", then {nextBatchWatermarkMs[, stateUniqueIds]}."""
        lines = _lines(text)
        if not lines or not lines[0].startswith("v") or not lines[0][1:].isdigit():
            msg = f"commits/{batch} does not look like a Spark commit log entry"
            raise ValueError(msg)
        meta = _object(lines[1], f"commits/{batch} line 2") if len(lines) > 1 else {}
        ids: dict[int, list[list[str]]] = {}
        for op, partitions in (meta.get("stateUniqueIds") or {}).items():
            ids[int(op)] = [[str(u) for u in (p if isinstance(p, list) else [p])] for p in partitions]
        return cls(
            batch=batch,
            log_version=int(lines[0][1:]),
            next_watermark_ms=int(meta.get("nextBatchWatermarkMs", 0)),
            state_unique_ids=ids,
        )


@dataclass(frozen=True)
class OperatorMetadata:
    """What state/<op>/_metadata says about an operator (Spark 4.0+; v2 for transformWithState)."""

    operator_id: int | None
    name: str | None
    stores: tuple[tuple[str, int | None], ...]  # (store name, partitions)
    properties: str | None  # operatorPropertiesJson: transformWithState variables, time mode

    @property
    def store_names(self) -> list[str]:
        """The names of the operator's stores."""
        return [name for name, _ in self.stores]

    @property
    def partitions(self) -> int | None:
        """The partition count recorded for the operator's stores."""
        return next((count for _, count in self.stores if count is not None), None)

    @classmethod
    def parse(cls, text: str) -> OperatorMetadata:
        """Read v1 ({operatorInfo, stateStoreInfo[]}) or v2 (transformWithState) operator metadata."""
        lines = _lines(text)
        if len(lines) < 2:
            msg = "operator metadata has no body"
            raise ValueError(msg)
        meta = _object(lines[1], "operator metadata")
        info = meta.get("operatorInfo") or {}
        stores = tuple(
            (str(s.get("storeName", "default")), int(s["numPartitions"]) if "numPartitions" in s else None)
            for s in meta.get("stateStoreInfo") or []
            if isinstance(s, dict)
        )
        name = info.get("operatorName")
        op_id = info.get("operatorId")
        properties = meta.get("operatorPropertiesJson")
        return cls(
            operator_id=int(op_id) if isinstance(op_id, int | str) and str(op_id).isdigit() else None,
            name=str(name) if name else None,
            stores=stores,
            properties=str(properties) if properties else None,
        )
