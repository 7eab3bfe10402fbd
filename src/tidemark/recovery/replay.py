"""The source side of a recovery: whether the source can be replayed, and how (each source says: Source)."""

from __future__ import annotations

from datetime import datetime

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import UsageError
from tidemark.sources import EPOCH

__all__ = ["EPOCH", "check_replayable", "describe_replay", "replay_config"]


def check_replayable(pipeline: PipelineContext) -> None:
    """Recovery replays by event time: a source that can be replayed (a landing folder, Kafka), a window
    aggregation, and a sink that can say which windows it holds (each sink says: Sink.recover_gap)."""
    pipeline.source.replayable()  # a UsageError naming why when it cannot be replayed
    if pipeline.config.aggregation.kind.value != "window":
        msg = "tidemark recover needs a window aggregation (the replay resumes after the newest window the sink holds)"
        raise UsageError(msg)
    gap = pipeline.sink.recover_gap()
    if gap is not None:
        msg = f"tidemark recover refused: {gap}"
        raise UsageError(msg)


def replay_config(
    pipeline: PipelineContext, resume_from: datetime, source_offsets: str | None = None
) -> TidemarkConfig:
    """The config the replay query runs with: for an offset source, the plan's start offsets (or the earliest)."""
    del resume_from  # the replay filter goes to the query itself (replay_from)
    return pipeline.source.replayable().replay_config(source_offsets)


def describe_replay(pipeline: PipelineContext, resume_from: datetime) -> str:
    """One line saying from where the source is replayed (a plan with start offsets says them too)."""
    return pipeline.source.replayable().describe_replay(resume_from, None)
