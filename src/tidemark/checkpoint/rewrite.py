"""Rewrites of Spark's small checkpoint files for a new partition count: pure text in, text out, no I/O.

The offset log records the SQL settings a query must keep (`spark.sql.shuffle.partitions`, the state store
provider, ...) and Spark restores them from the newest entry on restart; the operator metadata records each
store's partition count and, for transformWithState, the absolute paths of its schema files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
SCHEMA_PATHS = "stateSchemaFilePaths"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _dump(value: Any) -> str:
    # Spark writes its log entries as compact JSON.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def rewrite_offset_conf(text: str, updates: dict[str, str]) -> str:
    """An offsets/<batch> entry with `updates` merged into its recorded conf; source offsets untouched."""
    lines = text.splitlines()
    index = next((i for i, line in enumerate(lines) if line.strip() and i > 0), None)
    if index is None or not lines[0].startswith("v"):
        msg = "not a Spark offset log entry"
        raise ValueError(msg)
    meta = json.loads(lines[index])
    if not isinstance(meta, dict):
        msg = "offset log metadata is not a JSON object"
        raise ValueError(msg)
    conf = dict(meta.get("conf") or {})
    conf.update(updates)
    meta["conf"] = conf
    lines[index] = _dump(meta)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


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
                schema_paths=tuple(str(p) for p in entry.get(SCHEMA_PATHS) or ()),
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
    lines = text.splitlines()
    index = next((i for i, line in enumerate(lines) if line.strip() and i > 0), None)
    if index is None or not lines[0].startswith("v"):
        msg = "not a Spark operator metadata file"
        raise ValueError(msg)
    body = json.loads(lines[index])
    for entry in body.get("stateStoreInfo") or []:
        entry["numPartitions"] = partitions
        if schema_root is not None and entry.get(SCHEMA_PATHS):
            folder = f"{schema_root.rstrip('/')}/{entry.get('storeName', 'default')}"
            entry[SCHEMA_PATHS] = [f"{folder}/{schema_file_name(p)}" for p in entry[SCHEMA_PATHS]]
    lines[index] = _dump(body)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def hadoop_uri(path_or_uri: str) -> str:
    """A location as Hadoop qualifies it in Spark's metadata: 'file:/abs/path' for local paths, else as given."""
    if "://" in path_or_uri or path_or_uri.startswith("file:"):
        return path_or_uri
    return f"file:{path_or_uri}"
