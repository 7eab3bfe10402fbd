"""What a run starts with: its state store provider and RocksDB's memory cap, from the config, the checkpoint and
the machine; read once when `tidemark run` starts, before the JVM (the cap is one per JVM, the provider one per
checkpoint).

Provider: an existing checkpoint keeps the one it was created with (Spark restores it from the offset log); a new
checkpoint gets `[checkpoint] state_store` when the config sets it, else the one `expected_state_keys` points to
(the HDFS-backed store where it is measured faster and its heap holds the keys with room, RocksDB otherwise), else
RocksDB. Cap: `bounded_memory_mb = "auto"` is sized by tidemark.sizing.rocksdb_cap from the state the checkpoint
holds (file sizes, no Spark) and what the executor has.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.config.model import (
    HDFS_PROVIDER,
    PROVIDER_KEY,
    ROCKSDB_PROVIDER,
    AggregationKind,
    StateStoreKind,
    TidemarkConfig,
)
from tidemark.config.rocksdb import AUTO, write_buffer_conf
from tidemark.errors import TidemarkError
from tidemark.findings import Finding, Severity
from tidemark.formats import (
    SHUFFLE_PARTITIONS,
    Checkpoint,
    CheckpointStatus,
    StateSize,
    last_progress,
    state_size,
)
from tidemark.sizing.load import conf_from_config
from tidemark.sizing.memory import MIB, MemoryConf
from tidemark.sizing.resident import RowShape, Workload, hdfs_footprint, shape_from_version_bytes, unsafe_row_bytes
from tidemark.sizing.rocksdb_cap import CapPlan, partition_sizes, plan_cap, state_need

log = logging.getLogger(__name__)

# Measured (BENCHMARKS.md, state store sections): with every key updated every batch the HDFS-backed store's
# batches were shorter than RocksDB + changelog from 100 k keys on (1.38x at 100 k, 1.18-1.71x at 1 M; 10 M keys:
# 1.40x with RocksDB at 1 GB), and longer at 10 k (0.85x). It holds every key on the JVM heap, though.
HDFS_FASTER_FROM_KEYS = 100_000
# The HDFS-backed store is chosen only when its peak heap (tidemark.sizing.resident) stays within this share of the
# executor heap: the rest is execution memory, and state only grows.
HDFS_HEAP_SHARE = 0.5


@dataclass(frozen=True)
class StartPlan:
    """The provider and the cap a run starts with, the config that carries them, and what to tell the user."""

    config: TidemarkConfig  # state_store and bounded_memory_mb resolved (and the overhead the cap needs)
    state_store: StateStoreKind
    store_chosen_by: str  # "checkpoint", "config", "hint" or "default"
    store_reason: str
    cap: CapPlan | None  # None for the HDFS-backed store and an unbounded RocksDB
    state: StateSize | None
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    def as_record(self) -> dict[str, object]:
        """The figures for the progress log's started line."""
        record: dict[str, object] = {
            "state_store": self.state_store.value,
            "chosen_by": self.store_chosen_by,
            "reason": self.store_reason,
        }
        if self.state is not None:
            record["state_bytes"] = self.state.total_bytes
            record["state_version"] = self.state.version
        if self.cap is not None:
            record["rocksdb"] = self.cap.as_record()
        return record


def machine_available_bytes() -> int | None:
    """The memory this machine has available now (Linux MemAvailable; else free pages), None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def estimated_shape(config: TidemarkConfig) -> RowShape:
    """A state row's UnsafeRow sizes guessed from the config: key columns (strings of 16 B) plus the window, and
    count, two timestamps and two buffer fields per extra aggregate."""
    keys = len(config.aggregation.key)
    key = unsafe_row_bytes(keys + 1, [16.0] * keys) + unsafe_row_bytes(2)
    value = unsafe_row_bytes(3 + 2 * len(config.aggregation.extra))
    return RowShape(float(key), float(value), origin="estimated from the config")


def store_for_hint(keys: int, config: TidemarkConfig, conf: MemoryConf) -> tuple[StateStoreKind, str]:
    """The provider `expected_state_keys` points to, and why."""
    per_executor = keys / max(1, conf.executors)
    if per_executor < HDFS_FASTER_FROM_KEYS:
        return StateStoreKind.ROCKSDB, (
            f"{per_executor:,.0f} keys per executor: below {HDFS_FASTER_FROM_KEYS:,} RocksDB with changelog "
            "checkpointing measured as fast as the HDFS-backed store (0.85x its batch at 10 k keys)"
        )
    shape = estimated_shape(config)
    heap = conf.executor_memory_bytes
    footprint = hdfs_footprint(shape, Workload(keys=per_executor, updated_per_batch=per_executor), heap)
    peak = footprint.peak_bytes(per_executor)
    if peak <= HDFS_HEAP_SHARE * heap:
        return StateStoreKind.HDFS, (
            f"{per_executor:,.0f} keys per executor fit the HDFS-backed store's heap with room (about "
            f"{peak / MIB:,.0f} MB at the peak of a batch of a {heap / MIB:,.0f} MB heap), and it measured shorter "
            "batches than RocksDB from 100 k keys on (1 M keys: RocksDB 1.18x)"
        )
    return StateStoreKind.ROCKSDB, (
        f"{per_executor:,.0f} keys per executor need about {peak / MIB:,.0f} MB of heap with the HDFS-backed store, "
        f"more than half the {heap / MIB:,.0f} MB heap: RocksDB keeps them off the heap"
    )


def _hdfs_outgrown(config: TidemarkConfig, conf: MemoryConf, checkpoint: str) -> Finding | None:
    """HDFS-backed state past half the heap, from the last batch the previous run logged."""
    event = last_progress(config.monitor_dir)
    progress = event.progress if event is not None else None
    if progress is None or not progress.state_operators:
        return None
    rows = progress.state_rows
    if rows <= 0:
        return None
    size = sum(op.custom_metrics.get("stateOnCurrentVersionSizeBytes", 0.0) for op in progress.state_operators)
    shape = shape_from_version_bytes(size / rows) if size > 0 else estimated_shape(config)
    per_executor = rows / max(1, conf.executors)
    heap = conf.executor_memory_bytes
    footprint = hdfs_footprint(shape, Workload(keys=per_executor, updated_per_batch=per_executor), heap)
    peak = footprint.peak_bytes(per_executor)
    if peak <= HDFS_HEAP_SHARE * heap:
        return None
    partitions = max((op.num_shuffle_partitions for op in progress.state_operators), default=0) or "N"
    return Finding(
        "HDFS_STATE_OUTGROWS_HEAP",
        Severity.WARNING,
        f"the HDFS-backed state held {rows:,} rows at batch {progress.batch_id}: about {peak / MIB:,.0f} MB of heap "
        f"per executor at the peak of a batch, more than half of the {heap / MIB:,.0f} MB heap; it grows into "
        "OutOfMemoryError as keys grow",
        f"move the state to RocksDB while the query is stopped: tidemark state repartition {checkpoint} "
        f'--partitions {partitions} --state-store rocksdb --apply, then set [checkpoint] state_store = "rocksdb"; '
        "or give the executors more heap (tidemark plan memory --from-log)",
    )


def _existing_store(check: Checkpoint) -> tuple[StateStoreKind, str] | None:
    """The provider a checkpoint with a committed batch was created with, and its partitions ("N" when not
    recorded); None without a committed batch."""
    batches = check.commit_batches()
    if not batches:
        return None
    offsets = check.find_offset(batches[-1])
    conf = offsets.conf if offsets is not None else {}
    provider = conf.get(PROVIDER_KEY, HDFS_PROVIDER)
    store = StateStoreKind.ROCKSDB if provider == ROCKSDB_PROVIDER else StateStoreKind.HDFS
    return store, conf.get(SHUFFLE_PARTITIONS, "N")


def plan_start(config: TidemarkConfig, available_bytes: int | None = None, read_machine: bool = True) -> StartPlan:
    """Choose the provider and size RocksDB's cap for a run of this config (reads the checkpoint's file sizes)."""
    conf = conf_from_config(config)
    local = conf.local
    if available_bytes is None and read_machine and local:
        available_bytes = machine_available_bytes()
    location = config.checkpoint.location
    findings: list[Finding] = []
    check = Checkpoint.open(location)
    existing: StateStoreKind | None = None
    partitions = "N"
    try:
        if check.status() is CheckpointStatus.PRESENT and (found := _existing_store(check)) is not None:
            existing, partitions = found
    except TidemarkError as exc:  # the run itself reports an unreadable checkpoint, in its own words
        log.debug("cannot read %s to size the state store: %s", location, exc)
    explicit = "state_store" in config.checkpoint.model_fields_set
    hint = config.checkpoint.expected_state_keys
    if existing is not None:
        store, chosen_by = existing, "checkpoint"
        reason = "a checkpoint keeps the provider it was created with"
        hinted, why = store_for_hint(hint, config, conf) if hint is not None else (existing, "")
        heap_short = hint is not None and hint / max(1, conf.executors) >= HDFS_FASTER_FROM_KEYS
        if existing is StateStoreKind.HDFS and hinted is StateStoreKind.ROCKSDB and heap_short:
            findings.append(
                Finding(
                    "STATE_STORE_OUTGROWN",
                    Severity.WARNING,
                    f"expected_state_keys = {hint:,} outgrows the HDFS-backed store {location} was created with, "
                    f"which Spark keeps: {why}",
                    f"move the state while the query is stopped: tidemark state repartition {location} --partitions "
                    f"{partitions} --state-store {hinted.value} --apply (or more partitions)",
                )
            )
        if explicit and config.checkpoint.state_store is not existing:
            findings.append(
                Finding(
                    "STATE_STORE_FIXED",
                    Severity.WARNING,
                    f"[checkpoint] state_store = {config.checkpoint.state_store.value!r} but {location} was created "
                    f"with the {existing.value} store, which Spark keeps",
                    f"tidemark state repartition {location} --partitions {partitions} --state-store "
                    f"{config.checkpoint.state_store.value} --apply moves the state (query stopped), or set it back",
                )
            )
    elif explicit:
        store, chosen_by, reason = config.checkpoint.state_store, "config", "[checkpoint] state_store"
    elif hint is not None:
        store, reason = store_for_hint(hint, config, conf)
        chosen_by = "hint"
        if config.aggregation.kind is AggregationKind.CUSTOM and store is StateStoreKind.HDFS:
            # transformWithState needs RocksDB's column families.
            store, reason = StateStoreKind.ROCKSDB, "custom per-key logic (transformWithState) needs RocksDB"
    else:
        store, chosen_by, reason = StateStoreKind.ROCKSDB, "default", "tidemark's default"
    checkpoint_conf = config.checkpoint.model_copy(update={"state_store": store})
    resolved = config.model_copy(update={"checkpoint": checkpoint_conf})

    state: StateSize | None = None
    cap: CapPlan | None = None
    if existing is not None:
        try:
            state = state_size(check)
        except TidemarkError as exc:
            log.debug("cannot measure the state of %s: %s", location, exc)
    if store is StateStoreKind.HDFS and existing is StateStoreKind.HDFS:
        outgrown = _hdfs_outgrown(config, conf, location)
        if outgrown is not None:
            findings.append(outgrown)
    bound = config.checkpoint.bounded_memory_mb
    if store is StateStoreKind.ROCKSDB and bound is not None:
        need = None
        if state is not None and state.provider is StateStoreKind.ROCKSDB:
            sizes, keys = partition_sizes([(s.partition, s.estimate_bytes, s.keys) for s in state.stores])
            need = state_need(sizes, conf, keys)
        configured = None if bound == AUTO else int(bound)
        cap = plan_cap(conf, local, need, available_bytes, configured, location)
        findings.extend(cap.findings)
        spark_conf = dict(config.spark.conf)
        # Write buffers sized from the state (the user's own settings in [spark.conf] win).
        for key, value in write_buffer_conf(cap.write_buffer_mb).items():
            spark_conf.setdefault(key, value)
        if configured is None and cap.memory_overhead_bytes is not None:
            spark_conf["spark.executor.memoryOverhead"] = f"{cap.memory_overhead_bytes // MIB}m"
        sized = checkpoint_conf.model_copy(update={"bounded_memory_mb": cap.cap_mb}) if configured is None else None
        resolved = resolved.model_copy(
            update={
                "checkpoint": sized or checkpoint_conf,
                "spark": config.spark.model_copy(update={"conf": spark_conf}),
            }
        )
    return StartPlan(resolved, store, chosen_by, reason, cap, state, tuple(findings))
