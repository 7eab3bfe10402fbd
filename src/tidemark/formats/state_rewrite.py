"""The JVM state writer behind `state repartition`, called through here: the one code outside this package that
writes state store files (Spark's own store classes, in `spark/jvm/TidemarkStateRewrite.scala`).

Python describes each store (a `StoreMove`), the helper reads its rows from every old partition, checks each
row's placement, and with a new state root writes them into the new partitions; it answers with counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.errors import CheckpointError
from tidemark.formats.join_state import JOIN_STORES
from tidemark.formats.layout import STATE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def state_root(checkpoint_folder: str | Path) -> str:
    """Where the state stores of a local checkpoint folder live (the helper's old and new state roots)."""
    return str(Path(checkpoint_folder) / STATE)


@dataclass(frozen=True)
class StoreMove:
    """One store of one operator, with what the helper needs to read its rows and place them."""

    operator_id: int
    operator_name: str
    store: str
    prefix_columns: int
    partitions: int | None  # as the operator metadata records it
    schema_files: tuple[str, ...]  # transformWithState: the schema files, in this checkpoint
    list_families: tuple[str, ...]  # families of several values per key (list state; join format 4's four)
    column_families: bool
    partition_key: dict[str, Any] = field(default_factory=dict)
    internal_families: tuple[str, ...] = ()  # created internal, as Spark creates them (join format 4's time index)

    @property
    def label(self) -> str:
        """How reports name the store."""
        return f"operator {self.operator_id} ({self.operator_name}) store {self.store}"

    @property
    def unique_id_index(self) -> int:
        """Where the store's id sits in each partition's list of a format v2 commit (a join's four in order)."""
        return JOIN_STORES.index(self.store) if self.store in JOIN_STORES else 0


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
    new_unique_ids: tuple[str | None, ...] = ()  # checkpoint format v2: each new partition's file id

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
            new_unique_ids=tuple(None if u is None else str(u) for u in data.get("newUniqueIds") or ()),
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
    old_unique_ids: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON spec of one store for the helper (new_state_root None: count only, write nothing; old_unique_ids:
    checkpoint format v2, the id of the version's files on each old partition)."""
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
        "internalColumnFamilies": list(move.internal_families),
        "partitionKey": move.partition_key,
        "oldUniqueIds": old_unique_ids,
    }


def run_move(spark: SparkSession, spec: dict[str, Any]) -> MoveResult:
    """Run the helper on one store in this session (a Spark job over the old partitions)."""
    from tidemark.spark.jvm import call

    try:
        return MoveResult.from_json(call(spark, json.dumps(spec)))
    except Exception as exc:
        if isinstance(exc, CheckpointError):
            raise
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        where = f"operator {spec['operatorId']} store {spec['storeName']}"
        msg = f"Spark could not move the state of {where}: {first[:400]}"
        raise CheckpointError(msg) from exc
