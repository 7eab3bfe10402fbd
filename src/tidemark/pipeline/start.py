"""A pipeline's start, planned once: the state store and RocksDB's cap sized for it, and the session that has them.

RocksDB's cap is one per JVM and the first store opened sets it, so every command that opens a pipeline's state
(run, recover and adopt with their replays, and their pre-checks) starts Spark with the planned settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.needs import pipeline_session
from tidemark.plan import store_start
from tidemark.plan.store_start import StartPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@contextmanager
def planned_session(
    config: TidemarkConfig, spark: SparkSession | None = None
) -> Iterator[tuple[SparkSession, StartPlan]]:
    """The pipeline's session started (or lent) with the settings of the planned start, and that plan."""
    start = store_start.plan_start(config)
    with pipeline_session(start.config, spark) as session:
        yield session, start
