"""The executor memory model: regions for known confs, verdicts at their boundaries, projection, recommendation."""

from __future__ import annotations

import pytest

from tidemark.config.model import StateStoreKind
from tidemark.errors import UsageError
from tidemark.sizing.memory import (
    MemoryConf,
    MemoryLoad,
    Verdict,
    layout_for,
    plan_memory,
    smallest_heap,
    verdict_for,
)

MB = 1024 * 1024
GB = 1024 * MB


def test_four_gig_heap_matches_the_issue_figures() -> None:
    layout = layout_for(MemoryConf(executor_memory_bytes=4 * GB))
    assert layout.reserved_bytes == 300 * MB
    assert layout.usable_bytes == 3796 * MB
    assert layout.unified_bytes / MB == pytest.approx(2277.6)
    assert layout.execution_region_bytes / MB == pytest.approx(2277.6 / 2)
    assert layout.storage_region_bytes / MB == pytest.approx(1138.8)
    assert layout.user_bytes / MB == pytest.approx(3796 * 0.4)
    # overhead defaults to max(384 MB, 10 % of the heap): 409.6 MB here
    assert layout.overhead_bytes == int(0.1 * 4 * GB)
    assert layout.container_bytes == 4 * GB + int(0.1 * 4 * GB)


def test_small_heap_gets_the_384_mb_overhead_floor_and_extras_add_to_the_container() -> None:
    conf = MemoryConf(executor_memory_bytes=2 * GB, off_heap_bytes=512 * MB, pyspark_memory_bytes=256 * MB)
    layout = layout_for(conf)
    assert layout.overhead_bytes == 384 * MB
    assert layout.container_bytes == (2048 + 384 + 512 + 256) * MB


def test_explicit_overhead_and_fractions_are_used() -> None:
    conf = MemoryConf(executor_memory_bytes=8 * GB, overhead_bytes=1 * GB, memory_fraction=0.75, storage_fraction=0.3)
    layout = layout_for(conf)
    assert layout.overhead_bytes == 1 * GB
    assert layout.unified_bytes == pytest.approx((8192 - 300) * MB * 0.75)
    assert layout.execution_region_bytes == pytest.approx((8192 - 300) * MB * 0.75 * 0.7)


def test_heap_below_spark_minimum_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="450 MiB"):
        MemoryConf(executor_memory_bytes=400 * MB)


@pytest.mark.parametrize(
    ("utilization", "verdict"),
    [(0.0, Verdict.OK), (0.8, Verdict.OK), (0.8000001, Verdict.TIGHT), (1.0, Verdict.TIGHT), (1.0000001, Verdict.OVER)],
)
def test_verdict_boundaries(utilization: float, verdict: Verdict) -> None:
    assert verdict_for(utilization) is verdict


# 800 MB heap with fraction 0.5: usable 500 MB, unified exactly 250 MB, execution region 125 MB.
EXACT = MemoryConf(executor_memory_bytes=800 * MB, memory_fraction=0.5)


@pytest.mark.parametrize(
    ("state", "verdict"),
    [(200 * MB, Verdict.OK), (200 * MB + 1, Verdict.TIGHT), (250 * MB, Verdict.TIGHT), (250 * MB + 1, Verdict.OVER)],
)
def test_plan_verdict_at_boundaries(state: int, verdict: Verdict) -> None:
    plan = plan_memory(EXACT, MemoryLoad(state_bytes=state))
    assert plan.verdict is verdict
    assert plan.per_executor.utilization == state / (250 * MB)


def test_utilization_is_required_over_unified_minus_cache() -> None:
    load = MemoryLoad(state_bytes=40 * MB, shuffle_bytes=30 * MB, sort_bytes=30 * MB, cached_bytes=50 * MB)
    plan = plan_memory(EXACT, load)
    assert plan.per_executor.required_bytes == 100 * MB
    assert plan.per_executor.execution_available_bytes == 200 * MB
    assert plan.per_executor.execution_without_borrowing_bytes == 125 * MB
    assert plan.per_executor.utilization == pytest.approx(0.5)


def test_cache_beyond_the_storage_region_is_evicted_so_execution_keeps_its_region() -> None:
    plan = plan_memory(EXACT, MemoryLoad(shuffle_bytes=100 * MB, cached_bytes=200 * MB))
    assert plan.per_executor.execution_available_bytes == 125 * MB
    assert plan.per_executor.utilization == pytest.approx(100 / 125)


def test_load_is_spread_over_executors_and_cluster_figures_add_up() -> None:
    conf = MemoryConf(executor_memory_bytes=800 * MB, memory_fraction=0.5, executors=4)
    plan = plan_memory(conf, MemoryLoad(state_bytes=400 * MB, shuffle_bytes=200 * MB, cached_bytes=100 * MB))
    assert plan.per_executor.required_bytes == 150 * MB
    assert plan.per_executor.execution_available_bytes == (250 - 25) * MB
    assert plan.cluster.execution_available_bytes == 4 * 225 * MB
    assert plan.cluster.required_bytes == 600 * MB
    assert plan.cluster.utilization == pytest.approx(600 / 900)
    assert plan.verdict is Verdict.OK


def test_rocksdb_state_is_off_heap_and_checked_against_the_overhead() -> None:
    conf = MemoryConf(executor_memory_bytes=2 * GB, executors=2, state_store=StateStoreKind.ROCKSDB)
    plan = plan_memory(conf, MemoryLoad(state_bytes=1 * GB, shuffle_bytes=100 * MB))
    assert plan.per_executor.state_on_heap_bytes == 0
    assert plan.per_executor.required_bytes == 50 * MB
    assert plan.layout.rocksdb_native_bytes == 512 * MB
    assert any("memoryOverhead" in note for note in plan.notes)
    # the recommended overhead holds the default 384 MB plus RocksDB's 512 MB
    assert plan.recommendation.memory_overhead_bytes == (384 + 512) * MB


def test_rocksdb_bounded_memory_replaces_the_estimate() -> None:
    conf = MemoryConf(executor_memory_bytes=2 * GB, state_store=StateStoreKind.ROCKSDB, rocksdb_bounded_bytes=256 * MB)
    plan = plan_memory(conf, MemoryLoad(state_bytes=3 * GB))
    assert plan.layout.rocksdb_native_bytes == 256 * MB
    assert not any("memoryOverhead" in note for note in plan.notes)


def test_projection_scales_state_shuffle_and_sort_but_not_the_cache() -> None:
    load = MemoryLoad(state_bytes=60 * MB, shuffle_bytes=20 * MB, sort_bytes=10 * MB, cached_bytes=50 * MB)
    plan = plan_memory(EXACT, load, scale=2.5)
    assert plan.projection is not None
    projected = plan.projection.load
    assert (projected.state_bytes, projected.shuffle_bytes, projected.sort_bytes) == (150 * MB, 50 * MB, 25 * MB)
    assert projected.cached_bytes == 50 * MB
    # (150 + 50 + 25) MB over (250 - 50) MB of execution memory
    assert plan.projection.per_executor.utilization == pytest.approx(225 / 200)
    assert plan.projection.verdict is Verdict.OVER
    assert plan.verdict is Verdict.OK


def test_recommendation_is_the_smallest_heap_under_target() -> None:
    # 1200 MB required, 100 MB cached, target 0.8: unified >= 1500 + 100, heap >= 300 + 1600 / 0.6 = 2966.67 MB
    load = MemoryLoad(state_bytes=1200 * MB, cached_bytes=100 * MB)
    plan = plan_memory(MemoryConf(executor_memory_bytes=4 * GB), load, target=0.8)
    assert plan.recommendation.executor_memory_bytes == 2967 * MB
    assert plan.recommendation.executor_memory == "2967m"
    assert plan.recommendation.utilization_at_recommended <= 0.8
    smaller = plan_memory(MemoryConf(executor_memory_bytes=2966 * MB), load)
    assert smaller.per_executor.utilization > 0.8


def test_recommendation_with_a_large_cache_uses_the_execution_region() -> None:
    # cache larger than the storage region: execution keeps unified x 0.5, so unified >= 2 x 125 MB = 250 MB,
    # heap >= 300 + 250 / 0.6 = 716.67 MB
    heap = smallest_heap(MemoryConf(executor_memory_bytes=1 * GB), required=100 * MB, cached=900 * MB, target=0.8)
    assert heap == 717 * MB


def test_recommendation_never_below_spark_minimum() -> None:
    plan = plan_memory(MemoryConf(executor_memory_bytes=1 * GB), MemoryLoad(shuffle_bytes=1 * MB))
    assert plan.recommendation.executor_memory_bytes == 450 * MB


def test_bad_scale_and_target_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        plan_memory(EXACT, MemoryLoad(), scale=0)
    with pytest.raises(UsageError):
        plan_memory(EXACT, MemoryLoad(), target=1.5)


def test_hdfs_state_beyond_the_usable_heap_warns_of_out_of_memory() -> None:
    conf = MemoryConf(executor_memory_bytes=1 * GB)
    assert not any("OutOfMemoryError" in n for n in plan_memory(conf, MemoryLoad(state_bytes=724 * MB)).notes)
    over = plan_memory(conf, MemoryLoad(state_bytes=724 * MB + 1))
    assert any("OutOfMemoryError" in n for n in over.notes)


def _seed_utilization(heap_gib: int) -> float:
    # The seed's own arithmetic: per executor, (heap - 300 MB) x 0.6 of unified memory, all of it available
    # to execution without cache; the load is the cluster's, spread over 4 executors.
    unified = (heap_gib * 1024 - 300) * MB * 0.6
    return (5.34 * GB + 3.8 * GB) / 4 / unified


@pytest.mark.parametrize(("heap_gib", "verdict"), [(4, Verdict.OVER), (8, Verdict.OK)])
def test_seed_figures_four_executors_with_5_34_gb_state_and_3_8_gb_sort(heap_gib: int, verdict: Verdict) -> None:
    conf = MemoryConf(executor_memory_bytes=heap_gib * GB, executors=4)
    plan = plan_memory(conf, MemoryLoad(state_bytes=int(5.34 * GB), sort_bytes=int(3.8 * GB)))
    assert plan.cluster.utilization == pytest.approx(_seed_utilization(heap_gib), rel=1e-6)
    assert plan.verdict is verdict
    # about 100 % at 4g (not OK), about 50 % at 8g (OK)
    assert plan.cluster.utilization == pytest.approx({4: 1.0, 8: 0.5}[heap_gib], abs=0.05)
