"""Which operators and stores a checkpoint holds: Spark's state-metadata, or the folders when it predates it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint, join_families, keyless_operator
from tidemark.spark.lines import Feature, first_line_with
from tidemark.statestore.logs import OperatorFolder, operator_folders

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.statestore.reader import StateSource

TIMER_VARIABLE_TYPE = "TimerState"
_USER_VARIABLE_TYPES = frozenset({"ValueState", "ListState", "MapState"})


class MetadataSource(StrEnum):
    """Where the operator list came from."""

    STATE_METADATA = "state-metadata"
    FOLDERS = "folders"


@dataclass(frozen=True)
class StateVariable:
    """One transformWithState state variable as recorded in the operator properties."""

    name: str
    kind: str
    ttl_enabled: bool


@dataclass(frozen=True)
class StoreInfo:
    """One (operator, store) pair of a checkpoint."""

    operator_id: int
    operator_name: str
    store: str
    num_partitions: int
    min_batch: int | None
    max_batch: int | None
    time_mode: str | None
    variables: tuple[StateVariable, ...]
    has_timers: bool
    has_changelog: bool
    disk_bytes: int
    from_metadata: bool
    # Join state formats 3 and 4: this join store is a column family of that store (its folder), not a folder.
    family_of: str | None = None

    @property
    def folder_store(self) -> str:
        """The store whose files hold this one's rows: itself, or the store it is a column family of."""
        return self.family_of or self.store

    @property
    def is_transform_with_state(self) -> bool:
        """True for transformWithState operators, whose rows are read one state variable at a time."""
        return "transformwithstate" in self.operator_name.lower()


def parse_operator_properties(text: str | None) -> tuple[str | None, tuple[StateVariable, ...], bool]:
    """Time mode, user state variables and whether timers exist, from the operatorProperties JSON."""
    if not text:
        return None, (), False
    try:
        props: Any = json.loads(text)
    except json.JSONDecodeError:
        return None, (), False
    if not isinstance(props, dict):
        return None, (), False
    variables = []
    has_timers = False
    for entry in props.get("stateVariables") or []:
        kind = str(entry.get("stateVariableType", ""))
        name = str(entry.get("stateName", ""))
        if kind == TIMER_VARIABLE_TYPE:
            has_timers = True
        elif kind in _USER_VARIABLE_TYPES and not name.startswith("$"):
            variables.append(StateVariable(name, kind, bool(entry.get("ttlEnabled", False))))
    time_mode = props.get("timeMode")
    return (str(time_mode) if time_mode else None), tuple(variables), has_timers


def _from_folder(folder: OperatorFolder) -> list[StoreInfo]:
    return [
        StoreInfo(
            operator_id=folder.operator_id,
            operator_name="unknown",
            store=store,
            num_partitions=len(folder.partitions),
            min_batch=None,
            max_batch=None,
            time_mode=None,
            variables=(),
            has_timers=False,
            has_changelog=folder.has_changelog,
            disk_bytes=folder.store_bytes.get(store, 0),
            from_metadata=False,
        )
        for store in folder.stores
    ]


def _read_metadata_files(checkpoint: Checkpoint, folders: dict[int, OperatorFolder]) -> list[Any] | None:
    """Rows shaped like Spark's state-metadata output, from the files; None when one does not parse."""
    rows: list[Any] = []
    for op, folder in folders.items():
        try:
            meta = checkpoint.operator_metadata(op)
        except CheckpointError:
            return None
        if meta is None:
            continue
        if meta.operator_id is None or meta.name is None:
            return None
        for store, partitions in meta.stores:
            rows.append(
                {
                    "operatorId": meta.operator_id,
                    "operatorName": meta.name,
                    "stateStoreName": store,
                    "numPartitions": partitions or len(folder.partitions),
                    "minBatchId": None,
                    "maxBatchId": None,
                    "operatorProperties": meta.properties,
                }
            )
    return rows


def list_stores(spark: SparkSession, source: StateSource) -> list[StoreInfo]:
    """Every (operator, store) of the checkpoint, from the operator metadata where Spark 4 wrote it."""
    folders = {f.operator_id: f for f in operator_folders(source.checkpoint)}
    # Reading the metadata files directly saves a Spark job; Spark's reader is the fallback for unknown layouts.
    rows = _read_metadata_files(source.checkpoint, folders)
    if rows is None:
        rows = spark.read.format("state-metadata").load(str(source.root)).collect() if folders else []
    return _stores(source.checkpoint, rows, folders)


def stores_from_files(checkpoint: Checkpoint, folders_only: bool = False) -> list[StoreInfo] | None:
    """The same without Spark: None when an operator's metadata file does not parse (Spark's reader then), or
    with folders_only the operators as their folders show them."""
    folders = {f.operator_id: f for f in operator_folders(checkpoint)}
    rows = _read_metadata_files(checkpoint, folders)
    if rows is None:
        return _stores(checkpoint, [], folders) if folders_only else None
    return _stores(checkpoint, rows, folders)


def _stores(checkpoint: Checkpoint, rows: list[Any], folders: dict[int, OperatorFolder]) -> list[StoreInfo]:
    stores: list[StoreInfo] = []
    described: set[int] = set()
    for row in sorted(rows, key=lambda r: (int(r["operatorId"]), str(r["stateStoreName"]))):
        op = int(row["operatorId"])
        folder = folders.get(op)
        time_mode, variables, has_timers = parse_operator_properties(row["operatorProperties"])
        described.add(op)
        name = str(row["operatorName"])
        # A global limit or aggregate keeps its state in partition 0 alone, whatever the metadata records.
        keyless = folder is not None and keyless_operator(checkpoint, op, name)
        physical = str(row["stateStoreName"])
        on_disk = folder.store_bytes.get(physical, 0) if folder else 0
        # Join state format 3: the join's four stores are column families of this one; listed as the four, the
        # files counted once (on the first).
        listed = [(f, physical) for f in join_families(checkpoint, op, row["operatorProperties"])]
        for index, (store, family_of) in enumerate(listed or [(physical, None)]):
            stores.append(
                StoreInfo(
                    operator_id=op,
                    operator_name=name,
                    store=store,
                    num_partitions=1 if keyless else int(row["numPartitions"]),
                    min_batch=int(row["minBatchId"]) if row["minBatchId"] is not None else None,
                    max_batch=int(row["maxBatchId"]) if row["maxBatchId"] is not None else None,
                    time_mode=time_mode,
                    variables=variables,
                    has_timers=has_timers,
                    has_changelog=folder.has_changelog if folder else False,
                    disk_bytes=on_disk if index == 0 else 0,
                    from_metadata=True,
                    family_of=family_of,
                )
            )
    for op, folder in sorted(folders.items()):
        if op not in described:
            stores.extend(_from_folder(folder))
    return stores


def legacy_hint(store: StoreInfo) -> str:
    """What to pass when an operator has no state metadata (a checkpoint written before Spark 4.0)."""
    return (
        f"operator {store.operator_id} has no state metadata (checkpoint written before Spark "
        f"{first_line_with(Feature.OPERATOR_METADATA)}): "
        f"read it with --operator {store.operator_id} --store {store.store}; "
        "transformWithState and join operators also need their state variable or join store name"
    )
