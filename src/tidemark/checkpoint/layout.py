"""Names of things in a Spark checkpoint: file kinds, versions, log entries; pure parsing, no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

OFFSETS = "offsets"
COMMITS = "commits"
SOURCES = "sources"
STATE = "state"
METADATA = "metadata"
TIDEMARK_DIR = "_tidemark"
SINK_LOG_DIR = "_spark_metadata"
# Folders inside a partition (or store) folder that belong to that same store, not a named store.
STORE_SUBFOLDERS = frozenset({"SSTs", "logs", "_metadata"})


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


def crc_companions(name: str) -> tuple[str, ...]:
    """Names of the checksum files Hadoop and Spark may write next to a file."""
    return (f".{name}.crc", f"{name}.crc", f".{name}.crc.crc")


def log_batch(name: str) -> int | None:
    """Batch id of an offsets/commits log file name, None for crc, temp and other files."""
    return int(name) if name.isdigit() else None


def batch_ids(folder: Path) -> list[int]:
    """Ascending batch ids of a local offsets/ or commits/ folder (empty when it does not exist)."""
    if not folder.is_dir():
        return []
    return sorted(batch for p in folder.iterdir() if (batch := log_batch(p.name)) is not None)


def sink_log_batch(name: str) -> tuple[int, bool] | None:
    """Batch id and is-compact of a `_spark_metadata` (or source log) file name."""
    if name.isdigit():
        return int(name), False
    if name.endswith(".compact") and name[: -len(".compact")].isdigit():
        return int(name[: -len(".compact")]), True
    return None


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
    """What state/<op>/_metadata/metadata says about an operator (Spark 4.0+)."""

    name: str | None
    store_names: list[str]
    partitions: int | None

    @classmethod
    def parse(cls, text: str) -> OperatorMetadata:
        """Read v1 ({operatorInfo, stateStoreInfo[]}) or v2 (transformWithState) operator metadata."""
        lines = _lines(text)
        if len(lines) < 2:
            msg = "operator metadata has no body"
            raise ValueError(msg)
        meta = _object(lines[1], "operator metadata")
        info = meta.get("operatorInfo") or {}
        stores = meta.get("stateStoreInfo") or []
        names = [str(s.get("storeName", "default")) for s in stores if isinstance(s, dict)]
        partitions = next(
            (int(s["numPartitions"]) for s in stores if isinstance(s, dict) and "numPartitions" in s), None
        )
        name = info.get("operatorName")
        return cls(name=str(name) if name else None, store_names=names, partitions=partitions)
