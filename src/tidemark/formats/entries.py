"""Spark's small checkpoint files as text: offsets, commits and operator metadata, parsed and rewritten; no I/O.

For a new partition count (repartition): the offset log records the SQL settings a query must keep
(`spark.sql.shuffle.partitions`, the state store provider, ...) and Spark restores them from the newest entry on
restart; the operator metadata records each store's partition count and, for transformWithState, the absolute
paths of its schema files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SCHEMA_PATHS = "stateSchemaFilePaths"
SCHEMA_PATH = "stateSchemaFilePath"  # one path, as Spark's pre-release 4.0.0 builds wrote it


def _dump(value: Any) -> str:
    # Spark writes its log entries as compact JSON.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_entry(text: str, what: str) -> tuple[list[str], int, Any]:
    """A Spark log entry's lines, the index of its JSON line (the first after the version) and that JSON."""
    lines = text.splitlines()
    index = next((i for i, line in enumerate(lines) if line.strip() and i > 0), None)
    if index is None or not lines[0].startswith("v"):
        msg = f"not a Spark {what}"
        raise ValueError(msg)
    return lines, index, json.loads(lines[index])


def _with_json(text: str, lines: list[str], index: int, body: Any) -> str:
    """The entry with its JSON line replaced by body, as Spark writes it (compact), the rest as it was."""
    lines[index] = _dump(body)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def rewrite_offset_conf(text: str, updates: dict[str, str]) -> str:
    """An offsets/<batch> entry with `updates` merged into its recorded conf; source offsets untouched."""
    lines, index, meta = _json_entry(text, "offset log entry")
    if not isinstance(meta, dict):
        msg = "offset log metadata is not a JSON object"
        raise ValueError(msg)
    conf = dict(meta.get("conf") or {})
    conf.update(updates)
    meta["conf"] = conf
    return _with_json(text, lines, index, meta)


def rewrite_commit_unique_ids(text: str, unique_ids: dict[int, list[list[str]]]) -> str:
    """A commits/<batch> entry of checkpoint format v2 whose `stateUniqueIds` name other state files: each listed
    operator's ids (per partition, one per store) replaced; the version line and the rest as they were."""
    lines, index, meta = _json_entry(text, "commit log entry")
    if not isinstance(meta, dict) or not isinstance(meta.get("stateUniqueIds"), dict):
        msg = "the commit log entry names no state files by unique id (checkpoint format v2)"
        raise ValueError(msg)
    meta["stateUniqueIds"] = {**meta["stateUniqueIds"], **{str(op): ids for op, ids in unique_ids.items()}}
    return _with_json(text, lines, index, meta)


def rewrite_offset_watermark(text: str, watermark_ms: int, timestamp_ms: int) -> str:
    """An offsets/<batch> entry with its metadata's batch watermark and timestamp replaced; the version line, the
    recorded conf and the source offsets exactly as they were (a no-data batch planned from the batch before)."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v") or not lines[1].strip():
        msg = "not a Spark offset log entry with a metadata line"
        raise ValueError(msg)
    meta = json.loads(lines[1])
    if not isinstance(meta, dict):
        msg = "offset log metadata is not a JSON object"
        raise ValueError(msg)
    meta["batchWatermarkMs"] = int(watermark_ms)
    meta["batchTimestampMs"] = int(timestamp_ms)
    return _with_json(text, lines, 1, meta)


@dataclass(frozen=True)
class StoreMetadata:
    """One store as the operator metadata lists it."""

    name: str
    partitions: int | None
    prefix_columns: int
    schema_paths: tuple[str, ...]  # transformWithState (metadata v2): absolute paths of the schema files


@dataclass(frozen=True)
class OperatorFile:
    """state/<op>/_metadata/metadata (v1) or _metadata/v2/<batch> (v2), with what repartition needs of it."""

    version: int
    operator_id: int
    name: str
    stores: tuple[StoreMetadata, ...]
    properties: dict[str, Any]  # operatorPropertiesJson (transformWithState: time mode, variables)

    @classmethod
    def parse(cls, text: str) -> OperatorFile:
        """Read the file's text (version line, then one JSON object)."""
        lines = _lines(text)
        if len(lines) < 2 or not lines[0].startswith("v") or not lines[0][1:].isdigit():
            msg = "not a Spark operator metadata file"
            raise ValueError(msg)
        body = json.loads(lines[1])
        info = body.get("operatorInfo") or {}
        stores = tuple(
            StoreMetadata(
                name=str(entry.get("storeName", "default")),
                partitions=int(entry["numPartitions"]) if "numPartitions" in entry else None,
                prefix_columns=int(entry.get("numColsPrefixKey", 0)),
                schema_paths=tuple(str(p) for p in entry.get(SCHEMA_PATHS) or ())
                or ((str(entry[SCHEMA_PATH]),) if entry.get(SCHEMA_PATH) else ()),
            )
            for entry in body.get("stateStoreInfo") or []
        )
        raw = body.get("operatorPropertiesJson")
        properties = json.loads(raw) if isinstance(raw, str) and raw else {}
        return cls(
            version=int(lines[0][1:]),
            operator_id=int(info.get("operatorId", -1)),
            name=str(info.get("operatorName", "unknown")),
            stores=stores,
            properties=properties if isinstance(properties, dict) else {},
        )


def schema_file_name(path: str) -> str:
    """The file name of a schema path as the metadata records it (a URI or an absolute path)."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def rewrite_operator_metadata(text: str, partitions: int, schema_root: str | None = None) -> str:
    """Operator metadata with every store's numPartitions set and schema paths moved to <schema_root>/<store>/."""
    lines, index, body = _json_entry(text, "operator metadata file")
    for entry in body.get("stateStoreInfo") or []:
        entry["numPartitions"] = partitions
        if schema_root is not None and entry.get(SCHEMA_PATHS):
            folder = f"{schema_root.rstrip('/')}/{entry.get('storeName', 'default')}"
            entry[SCHEMA_PATHS] = [f"{folder}/{schema_file_name(p)}" for p in entry[SCHEMA_PATHS]]
    return _with_json(text, lines, index, body)


_SCHEMA_FILE_TAIL = re.compile(r"/state/\d+/_stateSchema/.*$")


def relocate_schema_paths(text: str, checkpoint_root: str) -> str:
    """Operator metadata whose schema paths name files under checkpoint_root (a URI as Hadoop qualifies it), each
    keeping its place below the checkpoint (`state/<op>/_stateSchema/...`); paths of another shape stay."""
    lines, index, body = _json_entry(text, "operator metadata file")
    changed = False
    for entry in body.get("stateStoreInfo") or []:
        if entry.get(SCHEMA_PATH) and not entry.get(SCHEMA_PATHS):  # the pre-release 4.0.0 spelling
            entry[SCHEMA_PATHS] = [entry.pop(SCHEMA_PATH)]
            changed = True
        paths = entry.get(SCHEMA_PATHS)
        if not paths:
            continue
        moved = []
        for path in paths:
            tail = _SCHEMA_FILE_TAIL.search(str(path))
            moved.append(f"{checkpoint_root.rstrip('/')}{tail.group(0)}" if tail else path)
        changed = changed or moved != paths
        entry[SCHEMA_PATHS] = moved
    return _with_json(text, lines, index, body) if changed else text


def hadoop_uri(path_or_uri: str) -> str:
    """A location as Hadoop qualifies it in Spark's metadata: 'file:/abs/path' for local paths, else as given."""
    if "://" in path_or_uri or path_or_uri.startswith("file:"):
        return path_or_uri
    return f"file:{path_or_uri}"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _object(line: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        msg = f"{what} is not valid JSON, cut short or garbage ({exc.msg} at character {exc.pos})"
        raise ValueError(msg) from exc
    if not isinstance(value, dict):
        msg = f"{what} is not a JSON object"
        raise ValueError(msg)
    return value


# The newest log formats tidemark knows: offsets v2 (named sources, Spark 4.2+), commits v2 (format v2 ids, 4.0+)
# and v3 (named sinks, 4.2+).
MAX_OFFSET_LOG_VERSION = 2
MAX_COMMIT_LOG_VERSION = 3  # v3: Spark 4.2+ with spark.sql.streaming.queryEvolution.enableSinkEvolution


def log_version(line: str, what: str, newest: int) -> int:
    """The version of a log entry's first line ("v1"), as Spark's MetadataVersionUtil reads it."""
    text = line.strip()
    if not (text.startswith("v") and text[1:].isdigit() and int(text[1:]) > 0):
        msg = f"{what} does not start with a version line like 'v1' (found {text[:20]!r})"
        raise ValueError(msg)
    version = int(text[1:])
    if version > newest:
        msg = f"{what} is format v{version}, newer than any Spark tidemark knows writes (v1..v{newest})"
        raise UnknownVersionError(msg)
    return version


class UnknownVersionError(ValueError):
    """A log entry of a format version newer than tidemark knows."""


@dataclass(frozen=True)
class OffsetEntry:
    """One offsets/<batch> file: the batch Spark planned, with its watermark and source offsets."""

    batch: int
    watermark_ms: int
    timestamp_ms: int
    conf: dict[str, str]
    source_offsets: list[Any]
    version: int = 1
    source_names: tuple[str, ...] = ()  # v2 (named sources): the name of each offset, in order
    has_metadata: bool = True  # Spark before 2.1 wrote an empty metadata line

    @classmethod
    def parse(cls, batch: int, text: str) -> OffsetEntry:
        """Read the file's text as Spark's OffsetSeqLog does: version line, metadata line (may be empty), then
        one line per source (JSON, or "-" for none; v2: "<source id>:<offset>")."""
        lines = text.splitlines() or [""]
        version = log_version(lines[0], f"offsets/{batch}", MAX_OFFSET_LOG_VERSION)
        if len(lines) < 2:
            msg = f"offsets/{batch} ends after its version line (no metadata line): it is truncated"
            raise ValueError(msg)
        meta = _object(lines[1], f"offsets/{batch} line 2") if lines[1].strip() else {}
        sources: list[Any] = []
        names: list[str] = []
        for number, line in enumerate(lines[2:], start=3):
            value = line
            if version >= 2:
                name, colon, value = line.partition(":")
                if not colon:
                    msg = f"offsets/{batch} line {number} is not '<source id>:<offset>'"
                    raise ValueError(msg)
                names.append(name)
            if value.strip() == "-":
                sources.append(None)
                continue
            try:
                sources.append(json.loads(value))
            except json.JSONDecodeError as exc:
                msg = f"offsets/{batch} line {number} is not a JSON offset ({exc.msg})"
                raise ValueError(msg) from exc
        conf = meta.get("conf") or {}
        if not isinstance(conf, dict):
            msg = f"offsets/{batch}: its conf is not a JSON object"
            raise ValueError(msg)
        return cls(
            batch=batch,
            watermark_ms=int(meta.get("batchWatermarkMs", 0)),
            timestamp_ms=int(meta.get("batchTimestampMs", 0)),
            conf={str(k): str(v) for k, v in conf.items()},
            source_offsets=sources,
            version=version,
            source_names=tuple(names),
            has_metadata=bool(lines[1].strip()),
        )


@dataclass(frozen=True)
class CommittedSink:
    """One named sink of a v3 commit (Spark's SinkMetadataInfo): the sink the batch wrote, or an earlier one."""

    name: str
    provider: str
    active: bool


@dataclass(frozen=True)
class CommitEntry:
    """One commits/<batch> file: the batch is done; v2 also names the state files it wrote, v3 the named sinks."""

    batch: int
    log_version: int
    next_watermark_ms: int
    # operator id -> partition -> unique ids of that version's files (one per store); format v2 only.
    state_unique_ids: dict[int, list[list[str]]] = field(default_factory=dict)
    sinks: tuple[CommittedSink, ...] = ()  # v3 (sink evolution): every sink the query has had, by name

    @property
    def checkpoint_format(self) -> int:
        """The checkpoint format the commit shows: 2 when it names state files by unique id (a v2 commit always
        does; a v3 commit does when the checkpoint is format 2), else 1."""
        return 2 if self.log_version == 2 or self.state_unique_ids else 1

    def store_unique_ids(self, operator_id: int, store_index: int) -> list[str] | None:
        """The unique id of one store's files on each partition (format v2), None when the commit names none.

        Spark records one id per store, in the operator's store order (a join's four: JOIN_STORES)."""
        partitions = self.state_unique_ids.get(operator_id)
        if not partitions or any(len(ids) <= store_index for ids in partitions):
            return None
        return [ids[store_index] for ids in partitions]

    @classmethod
    def parse(cls, batch: int, text: str) -> CommitEntry:
        """Read the file's text: "v1"/"v2"/"v3", then an optional JSON line {nextBatchWatermarkMs[,
        stateUniqueIds][, sinkMetadataMap]} (Spark 2.2 wrote "{}")."""
        lines = text.splitlines() or [""]
        version = log_version(lines[0], f"commits/{batch}", MAX_COMMIT_LOG_VERSION)
        meta = _object(lines[1], f"commits/{batch} line 2") if len(lines) > 1 else {}
        ids: dict[int, list[list[str]]] = {}
        for op, partitions in (meta.get("stateUniqueIds") or {}).items():
            ids[int(op)] = [[str(u) for u in (p if isinstance(p, list) else [p])] for p in partitions]
        sinks = meta.get("sinkMetadataMap") or {}
        if not isinstance(sinks, dict):
            msg = f"commits/{batch}: its sinkMetadataMap is not a JSON object"
            raise ValueError(msg)
        return cls(
            batch=batch,
            log_version=version,
            next_watermark_ms=int(meta.get("nextBatchWatermarkMs", 0)),
            state_unique_ids=ids,
            sinks=tuple(
                CommittedSink(str(name), str(info.get("providerName", "")), bool(info.get("isActive", True)))
                for name, info in sinks.items()
                if isinstance(info, dict)
            ),
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
