"""The RocksDB settings tidemark gives a pipeline, and why (measured with benchmarks/state_store.py).

Profile of the state operator at 1 M keys, every key updated every batch (docs/benchmarks/state_store.md):
with Spark's RocksDB defaults a batch made 2 M `get` calls for 1 M updates. One is the aggregation reading
the key's old value; the other comes from `trackTotalNumberOfRows`, which reads every key before writing it
only to count the rows in state. Dropping that read took about a quarter of the JVM's CPU per batch and made
RocksDB + changelog as fast as the HDFS-backed store there; block cache and write buffer sizes, compression
and checkpoint format v2 made no measurable difference. Bounded memory puts RocksDB's block cache and write
buffers of all state stores of an executor under one cap, so native memory cannot grow with the state.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemark.config.provider import PROVIDER_KEY

PREFIX = "spark.sql.streaming.stateStore.rocksdb."
# `bounded_memory_mb = "auto"` (the default): `tidemark run` sizes one cap per executor at every start, from what
# the executor has and what the state needs (tidemark.sizing.rocksdb_cap). Where nothing sized it (a config turned
# into Spark settings outside a run: check, rehearse), this cap stands in: tidemark's fixed default before.
AUTO = "auto"
DEFAULT_BOUNDED_MEMORY_MB = 256
# Write buffers sized to the state (`tidemark run`, tidemark.sizing.rocksdb_cap.write_buffer_for), measured at 10 M
# keys (BENCHMARKS.md, "Write buffers that hold a batch"): with RocksDB's 64 MB buffers a store of 5 M keys whose
# every key a batch updates flushed several times a batch, so the next batch read every key back from files
# (9.5 us a `get`); a buffer that holds about a batch serves half the batches' reads from memory: batches 8 %
# shorter over 10 batches, compaction a third. Only then is the cap's write-buffer share raised from Spark's 0.5.
WRITE_BUFFER_CACHE_RATIO = 0.8
# Each store worked at once has its active buffer and the one being flushed.
BUFFERS_PER_STORE = 2
MIN_WRITE_BUFFER_MB = 64  # RocksDB's own default: never smaller, and below it nothing is set
WRITE_BUFFER_SIZE = f"{PREFIX}writeBufferSizeMB"
BOUNDED_MEMORY_USAGE = f"{PREFIX}boundedMemoryUsage"
MAX_MEMORY_USAGE = f"{PREFIX}maxMemoryUsageMB"
WRITE_BUFFER_RATIO = f"{PREFIX}writeBufferCacheRatio"


def most_write_buffer_mb(bounded_memory_mb: int, stores_at_once: int) -> int:
    """The largest write buffer a store gets under a cap: the raised share split over the buffers of the stores an
    executor works on at once (its cores' tasks)."""
    buffers = BUFFERS_PER_STORE * max(1, stores_at_once)
    return max(MIN_WRITE_BUFFER_MB, int(bounded_memory_mb * WRITE_BUFFER_CACHE_RATIO / buffers))


def write_buffer_conf(write_buffer_mb: int) -> dict[str, str]:
    """The settings for a store's write buffer of write_buffer_mb: none at RocksDB's own 64 MB or less."""
    if write_buffer_mb <= MIN_WRITE_BUFFER_MB:
        return {}
    # The memory manager (one per JVM) takes the ratio from the first store; each store its buffer size.
    return {WRITE_BUFFER_RATIO: str(WRITE_BUFFER_CACHE_RATIO), WRITE_BUFFER_SIZE: str(write_buffer_mb)}


def rocksdb_conf(changelog: bool, bounded_memory_mb: int | None, track_state_rows: bool) -> dict[str, str]:
    """The RocksDB provider's settings for a [checkpoint] table."""
    conf = {
        f"{PREFIX}changelogCheckpointing.enabled": str(changelog).lower(),
        # Off, a write no longer reads the key first; numRowsTotal is then reported as 0 (docs/state.md).
        f"{PREFIX}trackTotalNumberOfRows": str(track_state_rows).lower(),
    }
    if bounded_memory_mb is not None:
        conf[BOUNDED_MEMORY_USAGE] = "true"
        conf[MAX_MEMORY_USAGE] = str(bounded_memory_mb)
    return conf


def rows_tracked(conf: Mapping[str, str]) -> bool:
    """Does a query with these settings count its state rows (numRowsTotal)? Not RocksDB with tracking off."""
    provider = conf.get(PROVIDER_KEY, "")
    return "RocksDB" not in provider or conf.get(f"{PREFIX}trackTotalNumberOfRows", "true").lower() != "false"


# What the user reads where a figure is not counted: how to turn it on, and what it costs.
UNTRACKED_HINT = (
    "not tracked: RocksDB counts the rows in state only with [checkpoint] track_state_rows = true (one read "
    "before every state write, about a quarter of the state store's CPU); 'tidemark state stats CHECKPOINT' "
    "counts them now"
)
