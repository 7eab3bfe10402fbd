"""Custom per-key logic ([aggregation] kind = "custom", processor = "package.module:Class")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def build(events: DataFrame, config: TidemarkConfig) -> DataFrame:
    """Run the configured KeyedProcessor over the events through the lifecycle layer."""
    from tidemark.spark.lines import Feature, require

    require(Feature.TRANSFORM_WITH_STATE_PANDAS)  # before the import: Spark 3.5 has no stateful_processor module
    from tidemark.stateful.lifecycle import apply_processor
    from tidemark.stateful.loader import load_processor

    agg = config.aggregation
    assert agg.processor is not None
    processor = load_processor(agg.processor)
    if processor.idle_timeout is None and processor.ttl is None:
        log.info("%s sets no idle_timeout or ttl: its keys expire only where it calls ctx.expire_at", agg.processor)
    return apply_processor(events, processor, agg.key, config.event_time.column)
