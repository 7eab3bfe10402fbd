"""Does the sink folder on disk hold what this config writes? Checked before anything changes a sink.

A sink another job wrote (unpartitioned, partitioned by another column, other columns) would end up with files
of two schemas and windows twice; recover, run over an existing sink and audit refuse it in one line instead.
"""

from __future__ import annotations

from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import InputError
from tidemark.pipeline.transforms import session as session_transform
from tidemark.pipeline.transforms import window as window_transform
from tidemark.sinks import SinkMatch


def expected_columns(config: TidemarkConfig) -> tuple[str, ...] | None:
    """The columns this config's query writes (partition columns included), None when code decides (custom)."""
    agg = config.aggregation
    extras = tuple(e.output_name for e in agg.extra)
    if agg.kind is AggregationKind.WINDOW:
        return (*agg.key, *window_transform.OUTPUT_COLUMNS, *extras)
    if agg.kind is AggregationKind.SESSION:
        return (*agg.key, *session_transform.OUTPUT_COLUMNS)
    return None


def check_sink(pipeline: PipelineContext) -> SinkMatch | None:
    """What the sink holds against what the config writes (the sink's package reads it: a folder of files' partition
    folders and columns); None when there is nothing to compare (no files, or a table that checks its own schema)."""
    columns = expected_columns(pipeline.config)
    return pipeline.sink.match_layout(columns)


def require_matching_sink(pipeline: PipelineContext, action: str, fix: str) -> SinkMatch | None:
    """Raise a one-line InputError naming how the sink on disk differs from the config; before `action`."""
    found = check_sink(pipeline)
    if found is not None and found.problem is not None:
        msg = (
            f"{action} refused: the sink {found.uri} was not written by this config: {found.problem}. "
            f"Nothing was changed; {fix}"
        )
        raise InputError(msg)
    return found
