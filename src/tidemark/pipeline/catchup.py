"""Catch-up's memory ceiling: the most input one batch may read so the planner's memory model holds (pure).

The source's plan (sources/catchup.py) gets it through `CatchUpContext.memory_ceiling`: the planner's model sits
above the sources.
"""

from __future__ import annotations

from tidemark.sizing.memory import DEFAULT_TARGET_UTILIZATION, MemoryConf, MemoryLoad, layout_for, per_executor_usage


def memory_ceiling_bytes(
    conf: MemoryConf,
    state_bytes: int,
    expansion: float,
    target: float = DEFAULT_TARGET_UTILIZATION,
) -> int:
    """The most input one batch may read so that the planner's utilization stays at or under target.

    The model takes a batch's working set (shuffle, aggregation buffers, new state) to be at most its whole
    input, deserialized (input x expansion), spread over the executors like the planner's shuffle load; the
    state the log measured counts on the heap for the HDFS-backed store, as in `tidemark plan memory`.
    """
    layout = layout_for(conf)
    usage = per_executor_usage(conf, MemoryLoad(state_bytes=state_bytes), layout)
    headroom = target * usage.execution_available_bytes - usage.required_bytes
    return max(0, int(headroom * conf.executors / expansion))
