"""The stateful operators of a checkpoint as the state helper moves them between partition counts.

Spark places a state row on pmod(murmur3(partition key, seed 42), shuffle partitions), where the partition key
is the grouping key of the operator: the whole state key for aggregations, deduplication and
flatMapGroupsWithState; all but the session start for session windows; all but the value index for the
keyWithIndexToValue stores of a stream-stream join; all but the event time for join state format 4's
keyWithTsToValues and tsWithKey (Spark 4.2's timestamp key encoders hand the key back as the join key fields with
`__event_time` last, as the recorded key schema names it); and the grouping key inside each column family's key
for transformWithState. The helper checks this on every row it reads (the placement it computes for the current
count must be the partition the row was read from) and refuses the store otherwise.
"""

from __future__ import annotations

from typing import Any

from tidemark.formats import (
    INTERNAL_FAMILIES,
    JOIN_STORES,
    JOIN_V4_STORES,
    MULTI_VALUED,
    Checkpoint,
    OperatorEntry,
    OperatorFile,
    StoreMove,
    operator_schema_files,
)

TRANSFORM_WITH_STATE = "transformwithstate"
SESSION_WINDOW = "sessionwindowstatestoresaveexec"
JOIN = "symmetrichashjoin"
LIST_STATE = "ListState"


def _join_store_key(store: str) -> dict[str, Any]:
    """A join store (formats 1-2) or column family (3-4): the join keys, then the value index or the event time."""
    if store.endswith(("keyWithIndexToValue", "keyWithTsToValues", "tsWithKey")):
        return {"kind": "drop_last", "n": 1}
    return {"kind": "all"}


def partition_key(operator_name: str, store: str, column_families: bool = False) -> dict[str, Any]:
    """Where the grouping key Spark shuffled by sits in this operator's state keys."""
    name = operator_name.lower()
    if TRANSFORM_WITH_STATE in name:
        return {"kind": "transform_with_state"}
    if JOIN in name and column_families:
        # Join state formats 3 and 4: the stores are column families of `default`, each keyed as its store.
        return {"kind": "join", "families": {f: _join_store_key(f) for f in (*JOIN_STORES, *JOIN_V4_STORES)}}
    if SESSION_WINDOW in name:
        return {"kind": "drop_last", "n": 1}  # keys, then the session start
    if JOIN in name:
        return _join_store_key(store)
    return {"kind": "all"}


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
        # transformWithState's variables, or a join's stores from join state format 3 on: RocksDB column families.
        families = tws or meta.properties.get("useVirtualColumnFamilies") is True
        join_families = families and not tws
        # Several values per key: transformWithState's list variables; join format 4's families
        # (the helper looks up the families the store's schema file names).
        multi_valued = _list_variables(meta) if tws else tuple(sorted(MULTI_VALUED)) if join_families else ()
        for store in meta.stores:
            schema_files = operator_schema_files(checkpoint, entry.operator_id, store.name, store.schema_paths)
            moves.append(
                StoreMove(
                    operator_id=entry.operator_id,
                    operator_name=meta.name,
                    store=store.name,
                    prefix_columns=store.prefix_columns,
                    partitions=store.partitions,
                    schema_files=schema_files,
                    list_families=multi_valued,
                    internal_families=tuple(sorted(INTERNAL_FAMILIES)) if join_families else (),
                    column_families=families,
                    partition_key=partition_key(meta.name, store.name, families),
                )
            )
    return moves
