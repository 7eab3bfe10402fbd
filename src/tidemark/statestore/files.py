"""State read from its files, without Spark: row counts for `state stats`, decoded rows for `state show`.

The one way to read state where Spark's reader cannot (Spark 3.5 and older have none; it needs schema files Spark
wrote only from 3.1 on): formats/ replays each partition's store the way Spark's provider loads it. Counts are the
keys in the store, i.e. what Spark's numRowsTotal reports; rows are decoded with the schema Spark recorded
(`state/<op>/<part>/_metadata/schema`, Spark 3.1+) or the one the user passes as DDL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import (
    EVENT_TIME,
    MULTI_VALUED,
    TIME_POSTFIX,
    TIME_PREFIX,
    Checkpoint,
    Field,
    StateNotReadable,
    StateReadMethod,
    StoreRows,
    decode_row,
    fields_from_ddl,
    keyless_operator,
    merge_delimiter,
    multi_values,
    read_store,
    split_key,
    store_schemas,
)
from tidemark.statestore.metadata import StoreInfo

# Deduplication stores a one-field row holding null as every value; Spark 3.1 and 3.2 recorded the input row as its
# value schema instead (which is why their own reader fails on those checkpoints).
NULL_PLACEHOLDER = b"\x01" + bytes(15)


@dataclass(frozen=True)
class FileCounts:
    """One store's rows per partition, bytes and (RocksDB with column families) rows per family, from its files."""

    per_partition: dict[int, int]
    size: int | None  # key + value bytes as stored; None when a partition was counted from snapshot metadata
    families: dict[str, int]
    methods: frozenset[StateReadMethod]


@dataclass(frozen=True)
class ReadContext:
    """What reading one batch's state needs to know of the logs."""

    batch: int
    row_checksum: bool
    unique_ids: dict[int, list[list[str]]]  # checkpoint format v2: operator -> partition -> ids, one per store
    partitions: int | None  # spark.sql.shuffle.partitions recorded in the offsets
    merge_delimiter: bytes = b","  # between the values RocksDB's merge operator joined (formats.merge_delimiter)
    note: str | None = None  # what the state read means, where it is not a committed batch's output


def _before_commit_log(checkpoint: Checkpoint, batch: int | None) -> ReadContext:
    """Spark 2.0/2.1 kept no commit log: batch b finished when batch b + 1 was planned, and a restart re-runs the
    newest planned batch L from state version L (the output of batch L - 1)."""
    planned = checkpoint.offset_batches()[-1]
    at = planned - 1 if batch is None else batch
    if not -1 <= at < planned:
        msg = (
            f"{checkpoint.uri} was written before Spark 2.2 (no commit log): batches up to {planned - 1} finished "
            f"(batch {planned} was planned last): pass --batch in that range"
        )
        raise CheckpointError(msg)
    note = (
        f"written before Spark 2.2 (no commits/): a restart re-runs batch {planned}, loading state version "
        f"{planned}; the rows read are {'that batch' if at == planned - 1 else f'batch {at + 1}'}'s input state "
        f"(the output of batch {at})"
    )
    return ReadContext(batch=at, row_checksum=False, unique_ids={}, partitions=None, note=note)


def read_context(checkpoint: Checkpoint, batch: int | None) -> ReadContext:
    """The batch (latest committed when None), its recorded conf and its commit's unique ids."""
    if checkpoint.before_commit_log():
        return _before_commit_log(checkpoint, batch)
    at = batch if batch is not None else checkpoint.latest_committed_batch()
    offsets = checkpoint.find_offset(at)
    commit = checkpoint.find_commit(at)
    if commit is None:
        committed = checkpoint.commit_batches()
        span = f"{committed[0]}..{committed[-1]}" if committed else "none"
        msg = f"batch {at} is not a committed batch of {checkpoint.uri} (committed: {span}): pass --batch in that range"
        raise CheckpointError(msg)
    conf = offsets.conf if offsets else {}
    row_checksum = "spark.sql.streaming.stateStore.rowChecksum.enabled"
    partitions = conf.get("spark.sql.shuffle.partitions", "")
    return ReadContext(
        batch=at,
        row_checksum=conf.get(row_checksum, "false").lower() == "true",
        unique_ids=commit.state_unique_ids,
        partitions=int(partitions) if partitions.isdigit() else None,
        merge_delimiter=merge_delimiter(conf),
    )


def _partitions(checkpoint: Checkpoint, store: StoreInfo, context: ReadContext) -> range:
    if keyless_operator(checkpoint, store.operator_id, store.operator_name):
        return range(1)  # one partition whatever was recorded (a global limit or aggregate)
    return range(max(store.num_partitions, context.partitions or 0))


def _unique_id(store: StoreInfo, partition: int, context: ReadContext, single_store: bool) -> str | None:
    ids = context.unique_ids.get(store.operator_id, [])
    if not single_store or partition >= len(ids) or not ids[partition]:
        return None
    return ids[partition][0]


def count_from_files(checkpoint: Checkpoint, store: StoreInfo, context: ReadContext, single_store: bool) -> FileCounts:
    """Rows of one (operator, store) at the context's batch; StateNotReadable says why not."""
    per_partition: dict[int, int] = {}
    size: int | None = 0
    families: dict[str, int] = {}
    methods = set()
    # A format-4 join family keeps several values per key: counted one by one (as Spark's reader gives them).
    multi_valued = store.family_of is not None and store.store in MULTI_VALUED
    # A transformWithState list state keeps a key's elements in one value: counted one by one, as Spark's reader.
    lists = {v.name for v in store.variables if v.kind == "ListState"}
    for partition in _partitions(checkpoint, store, context):
        rows = read_store(
            checkpoint,
            store.operator_id,
            partition,
            store.folder_store,
            context.batch + 1,
            unique_id=_unique_id(store, partition, context, single_store),
            keep_entries=multi_valued or bool(lists),
            row_checksum=context.row_checksum,
            merge_delimiter=context.merge_delimiter,
        )
        methods.add(rows.method)
        if store.family_of is not None:
            # One join store of several in the physical store's column families: its keys alone, no bytes apart.
            if rows.method is StateReadMethod.SNAPSHOT_COUNT:
                msg = (
                    f"operator {store.operator_id} partition {partition}: {store.family_of} was counted from its "
                    f"snapshot's metadata, which gives no count per column family ({store.store})"
                )
                raise StateNotReadable(msg)
            if not multi_valued:
                per_partition[partition] = rows.families.get(store.store, 0)
            else:
                per_partition[partition] = _elements(rows, store.store, store, partition, context.merge_delimiter)
            size = None
            continue
        per_partition[partition] = rows.rows
        size = None if size is None or rows.size is None else size + rows.size
        for name, count in rows.families.items():
            if name in lists and rows.entries is not None:
                count = _elements(rows, name, store, partition, context.merge_delimiter)
            families[name] = families.get(name, 0) + count
    return FileCounts(per_partition, size, families, frozenset(methods))


def _elements(rows: StoreRows, family: str, store: StoreInfo, partition: int, delimiter: bytes) -> int:
    """The values a multi-valued family holds (list state elements, join format 4 values), not its keys."""
    try:
        return sum(
            len(multi_values(v, delimiter)) for k, v in (rows.entries or {}).items() if rows.family_of(k) == family
        )
    except ValueError as exc:
        where = store.store if family == store.store else f"{store.store} variable {family}"
        msg = f"operator {store.operator_id} partition {partition} store {where}: {exc}"
        raise StateNotReadable(msg) from exc


def _schema(
    checkpoint: Checkpoint, store: StoreInfo, key_ddl: str | None, value_ddl: str | None
) -> tuple[tuple[Field, ...], tuple[Field, ...], str | None]:
    """Key and value schema (the recorded ones, or the user's DDL) and the key encoder Spark recorded."""
    recorded: tuple[tuple[Field, ...], tuple[Field, ...]] | None = None
    encoder: str | None = None
    if key_ddl is None or value_ddl is None:
        try:
            families = store_schemas(checkpoint, store.operator_id, store.folder_store)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from exc
        if store.family_of is not None:
            families = [f for f in families if f.name == store.store]
        if len(families) == 1:
            recorded = (families[0].key, families[0].value)
            encoder = str(families[0].encoder.get("keyStateEncoderType") or "") or None
        elif len(families) > 1:
            msg = (
                f"operator {store.operator_id} keeps its state in column families (transformWithState): read it per "
                "state variable with Spark's reader (--reader spark, Spark 4.0+)"
            )
            raise StateNotReadable(msg)
    try:
        key = fields_from_ddl(key_ddl) if key_ddl else (recorded[0] if recorded else None)
        if value_ddl is not None:
            value: tuple[Field, ...] | None = fields_from_ddl(value_ddl) if value_ddl.strip() else ()  # dedup: none
        else:
            value = recorded[1] if recorded else None
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if key is None or value is None:
        msg = (
            f"operator {store.operator_id} store {store.store} has no state schema file (Spark wrote them from 3.1 "
            "on): pass --key-schema and --value-schema as Spark DDL, e.g. --key-schema 'window STRUCT<start: "
            "TIMESTAMP, end: TIMESTAMP>, user STRING' --value-schema 'count BIGINT'"
        )
        raise UsageError(msg)
    return key, value, encoder


def _flat(prefix: str, value: Any, fields: tuple[Field, ...] | None, out: dict[str, Any]) -> None:
    if fields is not None and isinstance(value, dict | type(None)):
        for field in fields:
            inner = value.get(field.name) if isinstance(value, dict) else None
            _flat(f"{prefix}_{field.name}", inner, field.fields if field.type == "struct" else None, out)
        return
    if isinstance(value, list | dict):
        out[prefix] = json.dumps(value, default=str, sort_keys=True)
        return
    out[prefix] = value


def rows_from_files(
    checkpoint: Checkpoint,
    store: StoreInfo,
    context: ReadContext,
    single_store: bool,
    schemas: tuple[str | None, str | None],
    limit: int | None,
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """Up to `limit` rows of one store, keys and values flattened into columns (as Spark's reader shows them)."""
    key_fields, value_fields, encoder = _schema(checkpoint, store, *schemas)
    row_fields = key_fields
    if encoder in (TIME_POSTFIX, TIME_PREFIX) and key_fields and key_fields[-1].name == EVENT_TIME:
        row_fields = key_fields[:-1]  # the event time sits beside the row, not in it
    columns: tuple[str, ...] | None = None
    rows: list[tuple[Any, ...]] = []
    for partition in _partitions(checkpoint, store, context):
        replayed = read_store(
            checkpoint,
            store.operator_id,
            partition,
            store.folder_store,
            context.batch + 1,
            unique_id=_unique_id(store, partition, context, single_store),
            keep_entries=True,
            row_checksum=context.row_checksum,
            merge_delimiter=context.merge_delimiter,
        )
        entries = replayed.entries or {}
        if store.family_of is not None:  # one join store among the column families: its keys alone
            entries = {k: v for k, v in entries.items() if replayed.family_of(k) == store.store}
        elif replayed.families:
            msg = (
                f"operator {store.operator_id} keeps its state in column families (transformWithState): read it per "
                "state variable with Spark's reader (--reader spark, Spark 4.0+)"
            )
            raise StateNotReadable(msg)
        for key, value in sorted(entries.items()):
            try:
                if store.family_of is not None:
                    row_bytes, event_time = split_key(key[2:], encoder)  # after the 2-byte family id
                else:
                    row_bytes, event_time = key[replayed.key_prefix :], None
                decoded_key = decode_row(row_bytes, row_fields)
                if event_time is not None and row_fields is not key_fields:
                    decoded_key[EVENT_TIME] = event_time
                # A format-4 join family keeps several values per key: one row each, as Spark's reader gives.
                if store.store in MULTI_VALUED:
                    raw_values = [
                        one[1:] for one in multi_values(value, context.merge_delimiter)
                    ]  # each: version byte and row
                else:
                    raw_values = [value[replayed.value_prefix :]]
                for raw_value in raw_values:
                    flat: dict[str, Any] = {}
                    _flat("key", decoded_key, key_fields, flat)
                    if raw_value == NULL_PLACEHOLDER and len(value_fields) != 1:
                        _flat("value", None, value_fields, flat)
                    else:
                        _flat("value", decode_row(raw_value, value_fields), value_fields, flat)
                    flat["partition_id"] = partition
                    columns = columns or tuple(flat)
                    rows.append(tuple(flat.values()))
            except ValueError as exc:  # RowDecodeError, or a key or multi-value framing that does not parse
                msg = f"the state rows of operator {store.operator_id} do not fit the schema: {exc}"
                raise UsageError(msg) from exc
            if limit is not None and len(rows) >= limit:
                return columns or (), rows[:limit]
    if columns is None:
        empty: dict[str, Any] = {}
        _flat("key", None, key_fields, empty)
        _flat("value", None, value_fields, empty)
        columns = (*empty, "partition_id")
    return columns, rows
