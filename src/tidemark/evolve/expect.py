"""What state the query of a config will keep, worked out without running it.

Window and session aggregations: Spark plans the same aggregation over an empty batch of the source's
events, and its partial aggregate gives the state key and the aggregation buffer, which is exactly what the
streaming aggregation stores (state format 2). Custom processors: the lifecycle layer keeps one value state
named `state` with the processor's state_schema (wrapped with its TTL when it has one), keyed by the
grouping columns, and event- or processing-time timers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.formats import Field, struct_fields
from tidemark.stateful.api import STATE_VARIABLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OPERATOR_NAMES = {
    AggregationKind.WINDOW: "stateStoreSave",
    AggregationKind.SESSION: "sessionWindowStateStoreSaveExec",
    AggregationKind.CUSTOM: "transformWithStateInPandasExec",
}
_PROBE_VIEW = "tidemark_state_probe"


@dataclass(frozen=True)
class ExpectedState:
    """The one stateful operator a tidemark pipeline runs, as the config describes it."""

    kind: AggregationKind
    operator: str
    key: tuple[Field, ...]
    value: tuple[Field, ...]
    key_columns: tuple[str, ...]
    watermark_ms: int
    window_ms: int | None = None
    slide_ms: int | None = None
    gap_ms: int | None = None
    time_mode: str | None = None  # custom: EventTime or ProcessingTime
    ttl: bool | None = None  # custom: the state variable has a TTL
    family: str | None = None  # custom: the column family of the state variable


def _ms(delta: object) -> int | None:
    from datetime import timedelta

    return int(delta.total_seconds() * 1000) if isinstance(delta, timedelta) else None


def _events(spark: SparkSession, config: TidemarkConfig) -> DataFrame:
    """The config's events as its query builds them (a probe: no query starts)."""
    from tidemark.context import PipelineContext
    from tidemark.pipeline.query import build_events

    return build_events(spark, PipelineContext.of(config))


def _aggregate_state(spark: SparkSession, config: TidemarkConfig) -> dict[str, tuple[Field, ...]]:
    from tidemark.pipeline.query import build_output
    from tidemark.spark.jvm import call

    events = _events(spark, config)
    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), events.schema)
    build_output(empty, config).createOrReplaceTempView(_PROBE_VIEW)
    try:
        found = json.loads(call(spark, json.dumps({"action": "aggregate_state", "view": _PROBE_VIEW})))
    finally:
        spark.catalog.dropTempView(_PROBE_VIEW)
    return {part: struct_fields(json.loads(found[part])) for part in ("key", "value", "output") if part in found}


def _events_fields(spark: SparkSession, config: TidemarkConfig) -> dict[str, Field]:
    events = _events(spark, config)
    return {f.name: f for f in struct_fields(events.schema.jsonValue())}


def expected_state(spark: SparkSession, config: TidemarkConfig) -> ExpectedState:
    """The stateful operator, state key and value schema, and timing settings the config's query will use."""
    agg = config.aggregation
    kind = agg.kind
    base = {
        "kind": kind,
        "operator": OPERATOR_NAMES[kind],
        "key_columns": tuple(agg.key),
        "watermark_ms": _ms(config.event_time.watermark) or 0,
    }
    if kind is AggregationKind.WINDOW:
        state = _aggregate_state(spark, config)
        return ExpectedState(
            key=state["key"],
            value=state["value"],
            window_ms=_ms(agg.window),
            slide_ms=_ms(agg.slide or agg.window),
            **base,  # type: ignore[arg-type]
        )
    if kind is AggregationKind.SESSION:
        state = _aggregate_state(spark, config)
        output = state["output"]
        key = (*(f for f in output if f.name in agg.key), Field("sessionStartTime", "timestamp", False))
        return ExpectedState(key=key, value=output, gap_ms=_ms(agg.gap), **base)  # type: ignore[arg-type]
    return _custom(spark, config, base)


def _custom(spark: SparkSession, config: TidemarkConfig, base: dict[str, object]) -> ExpectedState:
    from tidemark.schema import parse_ddl
    from tidemark.stateful.api import TimeMode
    from tidemark.stateful.loader import load_processor

    assert config.aggregation.processor is not None
    processor = load_processor(config.aggregation.processor)
    events = _events_fields(spark, config)
    key = tuple(events[name] for name in config.aggregation.key if name in events)
    value = struct_fields(parse_ddl(processor.state_schema).jsonValue())
    if processor.ttl is not None:
        value = (
            Field("value", "struct", True, {}, value),
            Field("ttlExpirationMs", "long", True),
        )
    return ExpectedState(
        key=key,
        value=value,
        time_mode=TimeMode(processor.time_mode).spark_name,
        ttl=processor.ttl is not None,
        family=STATE_VARIABLE,
        **base,  # type: ignore[arg-type]
    )
