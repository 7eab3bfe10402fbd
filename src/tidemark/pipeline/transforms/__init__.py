"""The stateful step, chosen by [aggregation] kind: window, session or custom per-key logic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import AggregationKind, TidemarkConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build_stateful(events: DataFrame, config: TidemarkConfig) -> DataFrame:
    """Apply the configured stateful step to watermarked events; the result is written in append mode."""
    kind = config.aggregation.kind
    if kind is AggregationKind.WINDOW:
        from tidemark.pipeline.transforms import window

        return window.build(events, config)
    if kind is AggregationKind.SESSION:
        from tidemark.pipeline.transforms import session

        return session.build(events, config)
    from tidemark.pipeline.transforms import custom

    return custom.build(events, config)
