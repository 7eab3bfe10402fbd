"""What some sources can do besides being read: be replayed, size their catch-up batches, report their lag.

Each capability is a small mixin ABC a source lists before `Source` (`class FileSource(Replayable, CatchesUp,
Source)`); callers ask `isinstance(source, Replayable)` and never which connector they hold. A source without one
answers the core's default (sources/base.py) or is simply not asked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TidemarkConfig
    from tidemark.formats import Checkpoint
    from tidemark.formats.kafka_offsets import Offsets
    from tidemark.sources.base import ReplayStart, SourcePosition
    from tidemark.sources.catchup import CatchUpContext, CatchUpPlan


class Replayable(ABC):
    """A source `recover` and `adopt` can read again from a resume point (a landing folder, Kafka)."""

    @abstractmethod
    def replay_start(self, spark: SparkSession, resume_from: Callable[[], datetime]) -> ReplayStart:
        """Where a replay of the windows from resume_from() starts (asked only when the source needs it)."""

    @abstractmethod
    def newest_event(self, spark: SparkSession, start: ReplayStart) -> datetime | None:
        """The newest valid event time of what a replay from start would read, None when there is none."""

    @abstractmethod
    def replay_config(self, start: str | None) -> TidemarkConfig:
        """The config the replay query runs with (start: the plan's offsets, for a source that has them)."""

    @abstractmethod
    def describe_replay(self, resume_from: datetime, start: ReplayStart | None) -> str:
        """One line saying what the replay reads, keeping events from resume_from on."""

    @abstractmethod
    def adoption_position(
        self, spark: SparkSession | None, old: Checkpoint, batch: int, resume_from: datetime
    ) -> SourcePosition | None:
        """Where an old plain-Spark job stood in this source after its committed batch (None: not read yet, it needs
        Spark); a UsageError when adopt cannot replay it."""


class CatchesUp(ABC):
    """A source whose backlog can be measured, so a run that starts behind reads it in larger batches."""

    @abstractmethod
    def catch_up_gap(self, spark: SparkSession | None) -> str | None:
        """None when its backlog can be measured here; otherwise why not (a glob pattern, no session for a broker)."""

    @abstractmethod
    def plan_catch_up(
        self, spark: SparkSession | None, context: CatchUpContext
    ) -> tuple[CatchUpPlan, frozenset[object] | None]:
        """The plan for the next phase, and what the backlog holds: the identities of what is waiting, so a query
        that took none of it is not planned again (None when the source cannot tell). Asked after catch_up_gap."""


class ReportsLag(ABC):
    """A source with positions its server can be asked about (`checkpoint inspect --source`, catch-up sizing)."""

    @abstractmethod
    def records_behind(self, spark: SparkSession) -> int:
        """Records between where the next batch starts and the end."""

    @abstractmethod
    def live_offsets(self, spark: SparkSession) -> tuple[Offsets, Offsets, str]:
        """(earliest, end, endpoint) of every partition it subscribes to, asked of its server."""
