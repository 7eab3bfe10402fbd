"""The source contract: what the pipeline and the tools ask of wherever a pipeline reads its events.

One implementation per family of `[source] format` (a landing folder of files, Kafka and Event Hubs, the rate
generator), each a connector of this package (files/, kafka/, rate.py) whose facade is its package; nothing outside
this package (and config/) branches on the source's format. `Source` is the small core every source answers; what
only some sources can do is an optional capability (sources/capabilities.py: Replayable, CatchesUp, ReportsLag)
that callers ask with isinstance. A new source subclasses `Source` (CONTRIBUTING.md: "Add a source").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from tidemark.compat import UTC
from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.errors import ConfigError, UsageError
from tidemark.schema import parse_ddl
from tidemark.sources.capabilities import Replayable
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from tidemark.formats import Checkpoint

CORRUPT_COLUMN = "_corrupt_record"
SOURCE_FILE_COLUMN = "_source_file"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RawStream:
    """The source's DataFrame (a stream, or one batch's input read again) and what the quarantine needs of it."""

    frame: DataFrame
    columns: tuple[str, ...]  # the user's columns, in schema order
    raw_line: Column | None  # the raw input line where the source keeps it (malformed rows)
    origin: Column  # where a record came from: file path, or topic/partition/offset


@dataclass(frozen=True)
class BatchInput:
    """What one committed batch read, as the checkpoint says: enough to read it again."""

    batch: int
    names: tuple[str, ...]  # what `audit` shows of it: the files, or the offsets it read to
    start: str | None = None  # an offset source's range (Spark's offsets JSON; None: the earliest)
    end: str | None = None


@dataclass(frozen=True)
class ReplayStart:
    """Where a replay (recover, adopt) reads its source from, and how that was found."""

    offsets: str | None  # Spark's startingOffsets JSON; None: the source is read from its beginning
    method: str  # one line: how the start was found


class SourcePosition(ABC):
    """An old job's committed position in its source (`tidemark adopt`)."""

    replay_offsets: str | None  # where the replay starts (Spark's offsets JSON), None: from the beginning

    @abstractmethod
    def describe(self) -> str:
        """One line for the plan."""

    @abstractmethod
    def refusal(self, resume_from: datetime) -> str | None:
        """Why the windows open at the cut-over could not be replayed from here, None when they can."""

    def replay_start(self) -> ReplayStart:
        """Where the replay starts, as `recover` states it."""
        return ReplayStart(self.replay_offsets, "the old job's position")


def parse_schema(ddl: str) -> StructType:
    """Parse the config's DDL schema, or raise a ConfigError naming the problem."""
    try:
        return parse_ddl(ddl)
    except ValueError as exc:
        msg = f"source.schema: {exc} (e.g. 'user STRING, ts STRING, value DOUBLE')"
        raise ConfigError(msg) from exc


def event_time_expression(config: TidemarkConfig, data_type: str) -> Column:
    """Cast the configured event-time column to a UTC timestamp; unreadable values become null."""
    from pyspark.sql import functions as F

    column = F.col(config.event_time.column)
    if data_type in ("timestamp", "timestamp_ntz"):
        return column.cast("timestamp")
    if data_type in ("bigint", "int", "double", "float", "decimal", "smallint"):
        seconds = column.cast("double") / (1000 if config.event_time.unit == "ms" else 1)
        return F.timestamp_seconds(seconds)
    if config.event_time.format:
        return F.try_to_timestamp(column, F.lit(config.event_time.format))
    return F.try_to_timestamp(column)


def newest_event(config: TidemarkConfig, frame: DataFrame) -> datetime | None:
    """The newest valid event time in a batch DataFrame of the source's rows (UTC), None when it has none."""
    from pyspark.sql import functions as F

    column = event_time_expression(config, dict(frame.dtypes)[config.event_time.column])
    row = frame.select(F.max(column).alias("newest")).first()
    newest = row["newest"] if row is not None else None
    if newest is None:
        return None
    assert isinstance(newest, datetime)
    # Spark hands back naive datetimes in the driver's local zone; convert through the epoch.
    return datetime.fromtimestamp(newest.timestamp(), tz=UTC) if newest.tzinfo is None else newest.astimezone(UTC)


class Source(ABC):
    """A pipeline's source, built from its config (sources.source_of): the core every source answers."""

    formats: ClassVar[frozenset[SourceFormat]]
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset()  # jars Spark needs to read it
    helper: ClassVar[bool] = False  # tidemark's own JVM helper asks the source's server (a broker's admin client)
    malformed: ClassVar[bool] = True  # its rows can be malformed (a generator's cannot)
    # A record's origin names it alone (topic/partition/offset): a batch's malformed records can travel with its
    # progress event and be told apart from a retried task's copies; a file's rows carry only the file's name.
    origin_names_record: ClassVar[bool] = False
    # Why recover and adopt cannot replay it (a source that is not Replayable).
    replay_refusal: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        if issubclass(cls, Replayable) and mro.index(Replayable) > mro.index(Source):
            msg = f"{cls.__name__}: list Replayable before Source in its bases (Source's refusals would answer)"
            raise TypeError(msg)

    def __init__(self, config: TidemarkConfig) -> None:
        self.config = config

    @property
    def format(self) -> SourceFormat:
        """The config's format (one of `formats`)."""
        return self.config.source.format

    # The stream and its inputs.

    def check(self) -> None:  # noqa: B027 (most sources have nothing to check)
        """Fail with one line when the source cannot be opened (a missing landing folder or secret)."""

    @abstractmethod
    def stream(self, spark: SparkSession) -> RawStream:
        """The source as a streaming DataFrame (check() has passed)."""

    def committed_inputs(self, checkpoint: Checkpoint, batches: list[int]) -> dict[int, BatchInput]:
        """What each of the batches read, from the checkpoint's logs; a batch it does not say is left out."""
        del checkpoint, batches
        return {}

    def read_input(self, spark: SparkSession, batch: BatchInput) -> RawStream | None:
        """One committed batch's input read again as a batch, parsed as the stream parses it."""
        del spark, batch
        return None

    # A run's start and its failures.

    def check_start(self, spark: SparkSession) -> SourceStart | None:
        """Before the query: the server answers, what is subscribed exists, no data it needs is gone."""
        del spark
        return None

    def describe_failure(self, spark: SparkSession, text: str) -> str | None:
        """One line for a query that failed on this source (authentication, timeout, lost data), or None."""
        del spark, text
        return None

    def missing_connector(self, failure: str) -> str | None:
        """The one line for a query that could not start because Spark lacks this source's connector, or None."""
        del failure
        return None

    def restartable_failure(self, failure: str) -> str | None:
        """A known Spark defect of this source, after which the query may simply start again: its line; or None."""
        del failure
        return None

    # Recovery: whether the source can be replayed (the Replayable capability).

    def replayable(self) -> Replayable:
        """This source as Replayable; a UsageError naming why when recover and adopt cannot replay it."""
        if isinstance(self, Replayable):
            return self
        msg = self.replay_refusal or f"the {self.format.value} source cannot be replayed"
        raise UsageError(msg)

    def _keeping(self, resume_from: datetime) -> str:
        return f"keeping events with {self.config.event_time.column} >= {resume_from.isoformat()}"


@dataclass(frozen=True)
class SourceStart:
    """What a source's start check found: its endpoint and, when the run goes on without them
    (fail_on_data_loss = false), the records lost since the last run: each range for the progress log, one line
    for the operator."""

    endpoint: str
    lost_records: int = 0
    lost: tuple[dict[str, object], ...] = ()  # each lost range (topic, partition, first, last)
    warning: str = ""
