"""The one place that builds a pipeline's streaming query from its config: source, validation, stateful step, sink.

`run` starts it, `check` plans its state from it (over an empty batch) and `check --rehearse` runs it once on a
copy of the checkpoint: all three get the same plan, so what they check is what runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.errors import EnvironmentProblem
from tidemark.needs import require_features
from tidemark.pipeline.quarantine import validate
from tidemark.pipeline.sinks import output_writers, writer_for
from tidemark.pipeline.transforms import build_stateful

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def build_events(spark: SparkSession, pipeline: PipelineContext, replay_from: datetime | None = None) -> DataFrame:
    """The source's good events: parsed, validated (malformed ones counted aside), watermarked.

    replay_from (recovery): only events at or after it are read.
    """
    from pyspark.sql import functions as F

    source = pipeline.source
    source.check()
    events = validate(source.stream(spark), pipeline).events
    if replay_from is not None:
        events = events.where(F.col(pipeline.config.event_time.column) >= F.lit(replay_from))
    return events


def output_start_column(config: TidemarkConfig) -> str | None:
    """The output column holding a row's window (or session) start, where the kind has one."""
    return {"window": "windowStart", "session": "sessionStart"}.get(config.aggregation.kind.value)


def build_output(events: DataFrame, config: TidemarkConfig, replay_from: datetime | None = None) -> DataFrame:
    """The stateful step over the events; replay_from keeps only windows starting at or after it."""
    from pyspark.sql import functions as F

    output = build_stateful(events, config)
    start_column = output_start_column(config)
    if replay_from is not None and start_column is not None:
        output = output.where(F.col(start_column) >= F.lit(replay_from))
    return output


def build_query(
    spark: SparkSession, pipeline: PipelineContext, replay_from: datetime | None = None, writers: int | None = None
) -> DataFrame:
    """The whole streaming plan up to its sink; writers (when given) is the task count of the writing stage."""
    require_features(pipeline.config)  # one line naming the Spark that has what the config asks for, before Spark fails
    output = build_output(build_events(spark, pipeline, replay_from), pipeline.config, replay_from)
    return output.coalesce(writers) if writers is not None else output


def task_slots(spark: SparkSession, config: TidemarkConfig) -> int:
    """Task slots of the run: the session's (executors registered so far) or the config's, the larger."""
    from tidemark.connect import default_parallelism
    from tidemark.sizing.load import conf_from_config

    conf = conf_from_config(config)
    return max(default_parallelism(spark), conf.executors * conf.cores)


def start_query(
    spark: SparkSession, pipeline: PipelineContext, available_now: bool, replay_from: datetime | None = None
) -> StreamingQuery:
    """Build the whole streaming plan from the config and start it.

    replay_from (recovery): only events at or after it are read, and only windows starting at or
    after it are written, so a replay rewrites exactly the windows the sink does not hold.
    """
    output = build_query(spark, pipeline, replay_from, output_writers(pipeline, task_slots(spark, pipeline.config)))
    try:
        return writer_for(output, pipeline, available_now).start()
    except Exception as exc:
        missing = pipeline.source.missing_connector(str(exc))
        if missing is not None:
            raise EnvironmentProblem(missing) from exc
        raise
