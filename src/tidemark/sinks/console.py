"""The console sink: rows printed by Spark, kept nowhere (trying a config out)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tidemark.config import SinkFormat
from tidemark.sinks.base import Sink, Tool

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


class ConsoleSink(Sink):
    """Spark's console sink."""

    format: ClassVar[SinkFormat] = SinkFormat.CONSOLE
    vouched_by: ClassVar[frozenset[Tool]] = frozenset()
    exactly_once_gap: ClassVar[str | None] = (
        'the console sink keeps no output to recover or audit ([sink] format = "parquet" or "delta" does)'
    )

    @property
    def path(self) -> str | None:
        """The console keeps nothing."""
        return None

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """Print every row, untruncated."""
        del output
        return writer.format("console").option("truncate", "false")
