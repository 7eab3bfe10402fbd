"""The stateful operators of a checkpoint as the state helper moves them between partition counts.

Spark places a state row on pmod(murmur3(partition key, seed 42), shuffle partitions), where the partition key
is the grouping key of the operator: the whole state key for aggregations, deduplication and
flatMapGroupsWithState; all but the session start for session windows; all but the value index for the
keyWithIndexToValue stores of a stream-stream join; and the grouping key inside each column family's key for
transformWithState. The helper checks this on every row it reads (the placement it computes for the current
count must be the partition the row was read from) and refuses the store otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.checkpoint.handle import Checkpoint
from tidemark.checkpoint.layout import SCHEMA_DIR, STATE
from tidemark.checkpoint.rewrite import OperatorFile, schema_file_name
from tidemark.errors import CheckpointError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRANSFORM_WITH_STATE = "transformwithstate"
SESSION_WINDOW = "sessionwindowstatestoresaveexec"
JOIN = "symmetrichashjoin"
LIST_STATE = "ListState"


@dataclass(frozen=True)
class OperatorEntry:
    """One operator: its metadata file(s) relative to the checkpoint and what the newest one says."""

    operator_id: int
    metadata: OperatorFile
    files: tuple[str, ...]  # every metadata file of the operator (v2 keeps one per batch it was written)


@dataclass(frozen=True)
class StoreMove:
    """One store of one operator, with what the helper needs to read its rows and place them."""

    operator_id: int
    operator_name: str
    store: str
    prefix_columns: int
    partitions: int | None  # as the operator metadata records it
    schema_files: tuple[str, ...]  # transformWithState: the schema files, in this checkpoint
    list_families: tuple[str, ...]  # transformWithState list-state variables (several values per key)
    column_families: bool
    partition_key: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How reports name the store."""
        return f"operator {self.operator_id} ({self.operator_name}) store {self.store}"


def partition_key(operator_name: str, store: str) -> dict[str, Any]:
    """Where the grouping key Spark shuffled by sits in this operator's state keys."""
    name = operator_name.lower()
    if TRANSFORM_WITH_STATE in name:
        return {"kind": "transform_with_state"}
    if SESSION_WINDOW in name:
        return {"kind": "drop_last", "n": 1}  # keys, then the session start
    if JOIN in name and store.endswith("keyWithIndexToValue"):
        return {"kind": "drop_last", "n": 1}  # join keys, then the index of the value
    return {"kind": "all"}


def _metadata_files(checkpoint: Checkpoint, op: int, latest_batch: int) -> list[str]:
    folder = f"{STATE}/{op}/_metadata"
    files = [f"{folder}/metadata"] if checkpoint.store.stat(f"{folder}/metadata") is not None else []
    listing = checkpoint.store.list_dir(f"{folder}/v2")
    v2 = sorted(int(n) for n, _ in (listing.files if listing else []) if n.isdigit())
    files += [f"{folder}/v2/{b}" for b in v2]
    newest_v2 = [b for b in v2 if b <= latest_batch]
    if newest_v2:  # the one Spark reads for the next batch goes last
        files.remove(f"{folder}/v2/{newest_v2[-1]}")
        files.append(f"{folder}/v2/{newest_v2[-1]}")
    return files


def operator_entries(checkpoint: Checkpoint) -> list[OperatorEntry]:
    """Every stateful operator with its metadata; a CheckpointError for operators Spark 4 wrote none for."""
    latest = checkpoint.latest_committed_batch()
    entries = []
    for op in checkpoint.operator_ids():
        files = _metadata_files(checkpoint, op, latest)
        if not files:
            msg = (
                f"operator {op} of {checkpoint.uri} has no state metadata (written before Spark 4.0): run the "
                "query for one batch on Spark 4.1 first, which writes it, then repartition"
            )
            raise CheckpointError(msg)
        text = checkpoint.read_text(files[-1]) or ""
        try:
            metadata = OperatorFile.parse(text)
        except (ValueError, TypeError, KeyError) as exc:
            msg = f"{checkpoint.store.uri(files[-1])} is not readable operator metadata ({exc}): it may be corrupt"
            raise CheckpointError(msg) from exc
        entries.append(OperatorEntry(op, metadata, tuple(files)))
    return entries


def _list_variables(metadata: OperatorFile) -> tuple[str, ...]:
    variables = metadata.properties.get("stateVariables") or []
    return tuple(
        str(v.get("stateName")) for v in variables if isinstance(v, dict) and v.get("stateVariableType") == LIST_STATE
    )


def store_moves(checkpoint: Checkpoint, entries: list[OperatorEntry]) -> list[StoreMove]:
    """One move per (operator, store), schema files resolved inside this checkpoint (Spark records them absolute)."""
    moves = []
    for entry in entries:
        meta = entry.metadata
        tws = TRANSFORM_WITH_STATE in meta.name.lower()
        for store in meta.stores:
            folder = f"{STATE}/{entry.operator_id}/{SCHEMA_DIR}/{store.name}"
            schema_rels = [f"{folder}/{schema_file_name(p)}" for p in store.schema_paths]
            for rel, original in zip(schema_rels, store.schema_paths, strict=True):
                if checkpoint.store.stat(rel) is None:
                    msg = f"the schema file {original} of operator {entry.operator_id} is not in {checkpoint.uri}"
                    raise CheckpointError(msg)
            schema_files = tuple(checkpoint.store.uri(rel) for rel in schema_rels)
            moves.append(
                StoreMove(
                    operator_id=entry.operator_id,
                    operator_name=meta.name,
                    store=store.name,
                    prefix_columns=store.prefix_columns,
                    partitions=store.partitions,
                    schema_files=schema_files,
                    list_families=_list_variables(meta) if tws else (),
                    column_families=tws,
                    partition_key=partition_key(meta.name, store.name),
                )
            )
    return moves


@dataclass(frozen=True)
class FamilyRows:
    """Rows of one column family read from one old partition, and their approximate bytes."""

    name: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class PartitionRead:
    """What the helper read from one old partition, and how many rows sat where Spark would not look them up."""

    partition: int
    misplaced: int
    misplaced_sample: str
    families: tuple[FamilyRows, ...]

    @property
    def rows(self) -> int:
        """Keys in this partition over all column families."""
        return sum(f.rows for f in self.families)

    @property
    def bytes(self) -> int:
        """Approximate key and value bytes."""
        return sum(f.bytes for f in self.families)


@dataclass(frozen=True)
class MoveResult:
    """The helper's answer for one store: rows per old partition, keys per new partition."""

    operator_id: int
    store: str
    families: tuple[str, ...]
    read: tuple[PartitionRead, ...]
    new_rows: tuple[int, ...]

    @property
    def misplaced(self) -> int:
        """Rows whose computed placement disagrees with where they were stored (must be 0)."""
        return sum(p.misplaced for p in self.read)

    @classmethod
    def from_json(cls, text: str) -> MoveResult:
        """Parse the helper's JSON result."""
        data = json.loads(text)
        read = tuple(
            sorted(
                (
                    PartitionRead(
                        partition=int(p["partition"]),
                        misplaced=int(p["misplaced"]),
                        misplaced_sample=str(p.get("misplacedSample", "")),
                        families=tuple(
                            FamilyRows(str(f["name"]), int(f["rows"]), int(f["bytes"])) for f in p["families"]
                        ),
                    )
                    for p in data["read"]
                ),
                key=lambda p: p.partition,
            )
        )
        return cls(
            operator_id=int(data["operatorId"]),
            store=str(data["storeName"]),
            families=tuple(str(f) for f in data["families"]),
            read=read,
            new_rows=tuple(int(n) for n in data["newPartitionRows"]),
        )


def helper_spec(
    move: StoreMove,
    *,
    old_state_root: str,
    new_state_root: str | None,
    version: int,
    old_partitions: int,
    new_partitions: int,
    read_conf: dict[str, str],
    write_conf: dict[str, str],
) -> dict[str, Any]:
    """The JSON spec of one store for the helper (new_state_root None: count only, write nothing)."""
    return {
        "operatorId": move.operator_id,
        "storeName": move.store,
        "oldStateRoot": old_state_root,
        "newStateRoot": new_state_root,
        "version": version,
        "oldPartitions": old_partitions,
        "newPartitions": new_partitions,
        "readConf": read_conf,
        "writeConf": write_conf,
        "useColumnFamilies": move.column_families,
        "numColsPrefixKey": move.prefix_columns,
        "schemaFiles": list(move.schema_files),
        "listColumnFamilies": list(move.list_families),
        "partitionKey": move.partition_key,
    }


def run_move(spark: SparkSession, spec: dict[str, Any]) -> MoveResult:
    """Run the helper on one store in this session (a Spark job over the old partitions)."""
    from tidemark.checkpoint.jvm import call

    try:
        return MoveResult.from_json(call(spark, json.dumps(spec)))
    except Exception as exc:
        if isinstance(exc, CheckpointError):
            raise
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        where = f"operator {spec['operatorId']} store {spec['storeName']}"
        msg = f"Spark could not move the state of {where}: {first[:400]}"
        raise CheckpointError(msg) from exc
