"""Where the planner's inputs come from: flags, a pipeline config, a progress log, the Spark REST API."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tidemark.config.model import PROVIDER_KEY, StateStoreKind, TidemarkConfig, local_threads
from tidemark.config.rocksdb import BOUNDED_MEMORY_USAGE, MAX_MEMORY_USAGE
from tidemark.errors import InputError, UsageError
from tidemark.formats import BatchProgress, read_progress
from tidemark.sizes import parse_size
from tidemark.sizing.memory import MIB, MemoryConf, MemoryLoad

DEFAULT_HEAP = "1g"


def spark_memory(text: str | int | float, plain_unit: int = MIB) -> int:
    """Parse a Spark memory setting; plain numbers are in plain_unit (MiB for spark.executor.memory and the like)."""
    if isinstance(text, int | float) or re.fullmatch(r"\s*\d+\s*", str(text)):
        return int(float(text)) * plain_unit
    return parse_size(str(text))


def _float(conf: Mapping[str, str], key: str, default: float) -> float:
    value = conf.get(key)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError as exc:
        msg = f"{key} = {value!r} is not a number"
        raise UsageError(msg) from exc


def _int(conf: Mapping[str, str], key: str) -> int | None:
    value = conf.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        msg = f"{key} = {value!r} is not a whole number"
        raise UsageError(msg) from exc


def conf_from_spark(conf: Mapping[str, str], master: str = "") -> MemoryConf:
    """Read the memory settings of a Spark conf; in local mode the driver's heap is the one executor."""
    threads = local_threads(master)
    store = StateStoreKind.of_provider(conf.get(PROVIDER_KEY))
    if threads is not None:
        heap = spark_memory(conf.get("spark.driver.memory", DEFAULT_HEAP))
        cores = threads
        executors = 1
    else:
        heap = spark_memory(conf.get("spark.executor.memory", DEFAULT_HEAP))
        cores = _int(conf, "spark.executor.cores") or 1
        executors = _int(conf, "spark.executor.instances") or 0
        max_cores = _int(conf, "spark.cores.max")
        if not executors and max_cores:
            executors = max(1, max_cores // cores)
        executors = executors or 1
    overhead = conf.get("spark.executor.memoryOverhead")
    off_heap = 0
    if conf.get("spark.memory.offHeap.enabled", "false").lower() == "true":
        off_heap = spark_memory(conf.get("spark.memory.offHeap.size", "0"), plain_unit=1)
    pyspark = conf.get("spark.executor.pyspark.memory")
    bounded = None
    if store is StateStoreKind.ROCKSDB and conf.get(BOUNDED_MEMORY_USAGE, "false").lower() == "true":
        bounded = spark_memory(conf.get(MAX_MEMORY_USAGE, "500"))
    return MemoryConf(
        executor_memory_bytes=heap,
        executors=executors,
        cores=cores,
        memory_fraction=_float(conf, "spark.memory.fraction", 0.6),
        storage_fraction=_float(conf, "spark.memory.storageFraction", 0.5),
        overhead_bytes=spark_memory(overhead) if overhead is not None else None,
        overhead_factor=_float(conf, "spark.executor.memoryOverheadFactor", 0.10),
        off_heap_bytes=off_heap,
        pyspark_memory_bytes=spark_memory(pyspark) if pyspark is not None else 0,
        state_store=store,
        rocksdb_bounded_bytes=bounded,
        local=threads is not None,
    )


def conf_from_config(config: TidemarkConfig) -> MemoryConf:
    """The memory settings a pipeline config asks for ([spark], [spark.conf], [checkpoint])."""
    conf = config.spark_conf()
    if config.checkpoint.bounded_memory_mb is not None:
        conf.setdefault(BOUNDED_MEMORY_USAGE, "true")
    return conf_from_spark(conf, config.spark.master)


@dataclass(frozen=True)
class ConfOverrides:
    """Flag values that replace what the config (or Spark's defaults) says; None keeps it."""

    executor_memory: str | None = None
    executors: int | None = None
    cores: int | None = None
    memory_fraction: float | None = None
    storage_fraction: float | None = None
    memory_overhead: str | None = None
    state_store: StateStoreKind | None = None
    rocksdb_max_memory: str | None = None


def resolve_conf(config: TidemarkConfig | None, overrides: ConfOverrides) -> MemoryConf:
    """Start from the config (or Spark's defaults: 1g heap, one executor), then apply the flags."""
    base = conf_from_config(config) if config is not None else None
    changes: dict[str, Any] = {}
    if overrides.executor_memory is not None:
        changes["executor_memory_bytes"] = spark_memory(overrides.executor_memory)
    if overrides.memory_overhead is not None:
        changes["overhead_bytes"] = spark_memory(overrides.memory_overhead)
    if overrides.rocksdb_max_memory is not None:
        changes["rocksdb_bounded_bytes"] = spark_memory(overrides.rocksdb_max_memory)
    for name in ("executors", "cores", "memory_fraction", "storage_fraction", "state_store"):
        value = getattr(overrides, name)
        if value is not None:
            changes[name] = value
    if base is None:
        changes.setdefault("executor_memory_bytes", spark_memory(DEFAULT_HEAP))
        return MemoryConf(**changes)
    return replace(base, **changes)


@dataclass(frozen=True)
class LogLoad:
    """What a progress log tells about memory: the peak state size and when it was seen."""

    batches: int
    state_bytes: int
    peak_batch_id: int | None
    state_rows: int
    state_store: StateStoreKind | None


def detect_state_store(progress: Sequence[BatchProgress]) -> StateStoreKind | None:
    """Tell the state store from the custom metrics each provider reports."""
    for batch in progress:
        for op in batch.state_operators:
            keys = op.custom_metrics.keys()
            if any(key.startswith("rocksdb") for key in keys):
                return StateStoreKind.ROCKSDB
            if "loadedMapCacheHitCount" in keys or "stateOnCurrentVersionSizeBytes" in keys:
                return StateStoreKind.HDFS
    return None


def load_from_log(path: str | Path) -> LogLoad:
    """The peak state memory (memoryUsedBytes summed over operators) over every batch of a progress log."""
    return load_from_progress(read_progress(path), path)


def load_from_progress(batches: Sequence[BatchProgress], path: str | Path) -> LogLoad:
    """load_from_log on progress already read (path only names it in messages)."""
    progress = [p for p in batches if p.state_operators]
    if not progress:
        msg = f"{path} holds no progress of a stateful query: give the log of a run with state, or --state-bytes"
        raise InputError(msg)
    peak = max(progress, key=lambda p: p.state_memory_bytes)
    return LogLoad(
        batches=len(progress),
        state_bytes=peak.state_memory_bytes,
        peak_batch_id=peak.batch_id,
        state_rows=peak.state_rows,
        state_store=detect_state_store(progress),
    )


@dataclass(frozen=True)
class RestLoad:
    """Execution and storage memory the Spark REST API reports for an application's executors."""

    executors: int
    peak_execution_bytes: int
    cached_bytes: int
    spark_unified_bytes: int


def _get_json(url: str) -> Any:
    if not url.startswith(("http://", "https://")):
        msg = f"not an http(s) address: {url}"
        raise UsageError(msg)
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (scheme checked above)
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        msg = f"cannot read the Spark REST API at {url}: {exc} (is the Spark UI running and reachable?)"
        raise UsageError(msg) from exc


def _executors_json(source: str) -> Any:
    if not source.startswith(("http://", "https://")):
        file = Path(source)
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            msg = f"{file} does not exist: give the Spark UI address or a saved /executors answer"
            raise UsageError(msg) from exc
        except (OSError, json.JSONDecodeError) as exc:
            msg = f"cannot read {file} as the JSON of the REST API's /executors: {exc}"
            raise UsageError(msg) from exc
    base = source.rstrip("/")
    if "/api/v1/applications/" in base:
        return _get_json(base if base.endswith("/executors") else f"{base}/executors")
    apps = _get_json(f"{base}/api/v1/applications")
    if not isinstance(apps, list) or not apps:
        msg = f"the Spark UI at {base} lists no application"
        raise UsageError(msg)
    return _get_json(f"{base}/api/v1/applications/{apps[0]['id']}/executors")


def _peak(executor: Mapping[str, Any], key: str) -> int:
    peaks = executor.get("peakMemoryMetrics") or {}
    value = peaks.get(key, 0)
    return int(value) if isinstance(value, int | float) else 0


def load_from_rest(source: str) -> RestLoad:
    """Peak execution memory and cached bytes per executor, from a Spark UI address or a saved /executors answer."""
    data = _executors_json(source)
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        msg = f"{source}: expected the list of executors of /api/v1/applications/<id>/executors"
        raise UsageError(msg)
    executors = [e for e in data if e.get("isActive", True)]
    # In cluster mode the driver is listed too but runs no tasks; in local mode it is the only executor.
    workers = [e for e in executors if e.get("id") != "driver"] or executors
    if not workers:
        msg = f"{source}: no active executor"
        raise UsageError(msg)
    return RestLoad(
        executors=len(workers),
        peak_execution_bytes=sum(
            _peak(e, "OnHeapExecutionMemory") + _peak(e, "OffHeapExecutionMemory") for e in workers
        ),
        cached_bytes=sum(int(e.get("memoryUsed", 0) or 0) for e in workers),
        spark_unified_bytes=max(int(e.get("maxMemory", 0) or 0) for e in workers),
    )


@dataclass(frozen=True)
class LoadFlags:
    """Load figures given as flags (size strings); None means not given."""

    state_bytes: str | None = None
    shuffle_bytes: str | None = None
    sort_bytes: str | None = None
    cached_bytes: str | None = None


def resolve_load(flags: LoadFlags, log: LogLoad | None = None, rest: RestLoad | None = None) -> MemoryLoad:
    """Flags win over the progress log and the REST API; what nobody gives is zero."""
    figures: dict[str, int] = {"state_bytes": 0, "shuffle_bytes": 0, "sort_bytes": 0, "cached_bytes": 0}
    origin: dict[str, str] = {}
    if log is not None:
        figures["state_bytes"] = log.state_bytes
        origin["state_bytes"] = f"progress log (peak, batch {log.peak_batch_id})"
    if rest is not None:
        # The executors endpoint reports execution memory as one peak; it is counted as shuffle.
        figures["shuffle_bytes"] = rest.peak_execution_bytes
        figures["cached_bytes"] = rest.cached_bytes
        origin["shuffle_bytes"] = "REST API (peak execution memory, shuffle and sort together)"
        origin["cached_bytes"] = "REST API (storage memory used)"
    for name in figures:
        value = getattr(flags, name)
        if value is not None:
            figures[name] = parse_size(value)
            origin[name] = "flag"
    return MemoryLoad(origin=origin, **figures)
