"""The sink contract: what the pipeline and the tools ask of wherever a pipeline writes its final rows.

One implementation per `[sink] format`, each in its own module of this package; nothing outside this package
(and config/) branches on the sink's format. A new sink subclasses `Sink` (CONTRIBUTING.md: "Add a sink").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

# Called with each committed batch's progress (Spark's StreamingQueryProgress as JSON).
BatchHook = Callable[[dict[str, Any]], None]


class Sink(ABC):
    """A pipeline's sink, built from its config (sinks.sink_of)."""

    format: ClassVar[SinkFormat]
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset()  # jars Spark needs to write it
    # What recover, audit, adopt and rollback can vouch for; None: they can. Else the one line they refuse with.
    exactly_once_gap: ClassVar[str | None] = None

    def __init__(self, config: TidemarkConfig) -> None:
        self.config = config

    @property
    def path(self) -> str | None:
        """Where the output lives (a folder or a table's folder); None for a sink that keeps nothing."""
        return self.config.sink.path

    def spark_settings(self) -> Mapping[str, str]:
        """Settings the session needs for this sink (under the config's own explicit ones)."""
        return {}

    def writers(self, task_slots: int) -> int | None:
        """How many tasks run the writing stage; None leaves Spark's plan."""
        del task_slots
        return None

    @abstractmethod
    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """The streaming writer, pointed at this sink (the checkpoint, trigger and query name are set already)."""

    def batch_hook(self) -> BatchHook | None:
        """What to record after each committed batch (tidemark's ledger), None for nothing."""
        return None

    def files_checked(self) -> str | None:
        """The folder of plain Parquet files whose layout must match the config before anything changes it."""
        return None

    def refuse_exactly_once(self, action: str) -> None:
        """Raise a one-line UsageError when `action` (recover, audit, adopt...) cannot vouch for this sink."""
        from tidemark.errors import UsageError

        if self.exactly_once_gap is not None:
            msg = f"{action} refused: {self.exactly_once_gap}"
            raise UsageError(msg)
