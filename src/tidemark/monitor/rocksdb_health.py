"""RocksDB batch by batch: memory used against the cap, cache misses and get latency, and a crawl seen coming.

A bounded RocksDB whose state outgrows its cap does not fail: its reads go to disk more and more, and batches
slow down until one takes hours (10 M keys in 256 MB: one batch in 30 minutes, BENCHMARKS.md). The first sign is
in Spark's RocksDB metrics of every batch: the share of `get` calls that miss the block cache
(`rocksdbReadBlockCacheMissCount / rocksdbGetCount`) climbs batch after batch as keys grow, and the time per get
with it. Measured on 100 k to 600 k growing keys, every key updated every batch (2 partitions): with a 16 MB cap
the miss share went 0.06, 0.09, 0.22, 0.38, 0.43 and the time per get 7 to 29 us; with 512 MB it stayed at 0.00-0.01.

The watch fires once per run: when the miss share of the last `window` batches peaks at the newest, at least
RISE_FACTOR times their lowest and MISS_SHARE_RISING or more, or whenever it is at MISS_SHARE_HIGH. Its fix names
the cap to set, sized like tidemark sizes it at start (tidemark.sizing.rocksdb_cap) from the SST bytes the batch
reports, or the keys it updated.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from tidemark.formats import BatchProgress
from tidemark.sizing.memory import MIB
from tidemark.sizing.rocksdb_cap import GROWTH_HEADROOM, cap_for

CRAWL_CODE = "ROCKSDB_CRAWL_AHEAD"
# A miss share that rose by RISE_FACTOR over the window is a warning from MISS_SHARE_RISING on; at MISS_SHARE_HIGH it
# is one without a trend. (A steady share that wobbles must not fire: it has to grow by half at least.)
MISS_SHARE_RISING = 0.1
RISE_FACTOR = 1.5
MISS_SHARE_HIGH = 0.3
DEFAULT_WINDOW = 3


@dataclass(frozen=True)
class RocksDBBatch:
    """One batch's RocksDB figures, summed over the RocksDB state operators."""

    batch_id: int
    gets: float
    cache_misses: float
    cache_hits: float
    get_ms: float
    updates: int
    memory_bytes: int
    sst_bytes: float
    instances: int
    cap_bytes: int | None

    @classmethod
    def from_progress(cls, progress: BatchProgress, cap_bytes: int | None = None) -> RocksDBBatch | None:
        """The batch's RocksDB figures, None when no operator reports RocksDB metrics."""
        ops = [op for op in progress.state_operators if "rocksdbGetCount" in op.custom_metrics]
        if not ops:
            return None

        def total(name: str) -> float:
            return sum(op.custom_metrics.get(name, 0.0) for op in ops)

        return cls(
            batch_id=progress.batch_id,
            gets=total("rocksdbGetCount"),
            cache_misses=total("rocksdbReadBlockCacheMissCount"),
            cache_hits=total("rocksdbReadBlockCacheHitCount"),
            get_ms=total("rocksdbGetLatency"),
            updates=sum(op.num_rows_updated for op in ops),
            memory_bytes=sum(op.memory_used_bytes for op in ops),
            sst_bytes=total("rocksdbSstFileSize"),
            instances=max(1, sum(op.num_state_store_instances for op in ops)),
            cap_bytes=cap_bytes,
        )

    @property
    def miss_share(self) -> float:
        """Cache misses per get: the share of reads that went past the cache to the files."""
        return self.cache_misses / self.gets if self.gets > 0 else 0.0

    @property
    def micros_per_get(self) -> float:
        """Mean time of one get, in microseconds."""
        return self.get_ms * 1000 / self.gets if self.gets > 0 else 0.0

    @property
    def cap_share(self) -> float | None:
        """Memory used over the cap (None without a cap)."""
        return self.memory_bytes / self.cap_bytes if self.cap_bytes else None


@dataclass(frozen=True)
class CrawlWarning:
    """The finding of a crawl coming: what rose, and the cap to set."""

    batch_id: int
    miss_share: float
    micros_per_get: float
    suggested_cap_mb: int
    message: str
    fix: str
    code: str = CRAWL_CODE


def suggested_cap_bytes(batch: RocksDBBatch, active_partitions: int | None) -> float:
    """The cap the batch's state asks for: the partitions worked at once x (6x their SST bytes, or 100 B a key).

    Without the number of partitions worked at once (tasks per executor), all of them count: the safe side.
    """
    share = 1.0 if active_partitions is None else min(1.0, active_partitions / batch.instances)
    # keys updated: a lower bound of the keys held
    return share * cap_for(batch.sst_bytes, batch.updates) * GROWTH_HEADROOM


class CrawlWatch:
    """Watches a run's RocksDB batches and warns once when reads start going to disk more and more."""

    def __init__(
        self,
        active_partitions: int | None = None,
        room_bytes: float | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.active_partitions = active_partitions
        self.room_bytes = room_bytes
        self.window = max(2, window)
        self._recent: deque[RocksDBBatch] = deque(maxlen=self.window)
        self._seen = 0
        self.last: RocksDBBatch | None = None
        self.warning: CrawlWarning | None = None

    def observe(self, progress: BatchProgress, cap_bytes: int | None = None) -> CrawlWarning | None:
        """Take one batch; return the warning the first time a crawl shows, else None."""
        batch = RocksDBBatch.from_progress(progress, cap_bytes)
        if batch is None:
            return None
        self._seen += 1
        self.last = batch
        if self._seen == 1:
            return None  # a run's first batch loads the store: its reads say nothing about the cache
        self._recent.append(batch)
        if self.warning is not None:
            return None
        shares = [b.miss_share for b in self._recent]
        # Rising: over a full window the newest share is the highest, and half again the lowest at least.
        rising = len(shares) == self.window and shares[-1] == max(shares) and shares[-1] >= RISE_FACTOR * min(shares)
        if (rising and shares[-1] >= MISS_SHARE_RISING) or shares[-1] >= MISS_SHARE_HIGH:
            self.warning = self._warning(batch, shares, rising)
            return self.warning
        return None

    def _warning(self, batch: RocksDBBatch, shares: list[float], rising: bool) -> CrawlWarning:
        first = self._recent[0]
        trend = (
            f"rose from {min(shares):.2f} to {shares[-1]:.2f} over batches {first.batch_id}-{batch.batch_id}"
            if rising
            else f"is {shares[-1]:.2f} at batch {batch.batch_id}"
        )
        memory = f"{batch.memory_bytes / MIB:,.0f} MB"
        if batch.cap_bytes:
            memory += f" of its {batch.cap_bytes / MIB:,.0f} MB cap"
        message = (
            f"RocksDB reads are going to disk: the share of gets that miss the block cache {trend} "
            f"({batch.micros_per_get:,.1f} us a get, was {first.micros_per_get:,.1f}); RocksDB uses {memory}, "
            f"{batch.sst_bytes / MIB:,.0f} MB of SST files over {batch.instances} store instance(s). Batches slow "
            "down as keys grow until one takes hours"
        )
        wanted = suggested_cap_bytes(batch, self.active_partitions)
        cap_mb = max(16, math.ceil(wanted / MIB))
        if batch.cap_bytes:
            cap_mb = max(cap_mb, math.ceil(2 * batch.cap_bytes / MIB))
        fix = (
            f'set [checkpoint] bounded_memory_mb = {cap_mb} (or "auto": tidemark sizes it from the state at the '
            "next start) and restart: RocksDB's cap is fixed for the life of the process"
        )
        if self.room_bytes is not None and cap_mb * MIB > self.room_bytes:
            fix += (
                f"; the executor leaves RocksDB {self.room_bytes / MIB:,.0f} MB, so raise "
                "spark.executor.memoryOverhead (or free memory on this machine), spread the state over more "
                "partitions (tidemark state repartition CHECKPOINT --partitions N --apply), or use the HDFS-backed "
                "store if its heap holds the state (--state-store hdfs)"
            )
        return CrawlWarning(batch.batch_id, shares[-1], batch.micros_per_get, cap_mb, message, fix)
