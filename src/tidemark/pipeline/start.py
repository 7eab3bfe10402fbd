"""A pipeline's start, planned once: the state store and RocksDB's cap sized for it, and the session that has them.

RocksDB's cap is one per JVM and the first store opened sets it, so every command that opens a pipeline's state
(run, recover and adopt with their replays, and their pre-checks) starts Spark with the planned settings: each
opens one `Launch` and every step of it (the restart check, failover's recovery, the run, a replay) uses that
plan and that session. Steps from packages above pipeline/ (the restart check in evolve/, failover in recovery/)
join a run as `Prestart`s, so `run_pipeline` is the one entry of `tidemark run` and nothing copies its signature.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.needs import pipeline_session
from tidemark.sizing import store_start
from tidemark.sizing.store_start import StartPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.pipeline.run import RunResult
    from tidemark.spark.jars import Progress


@dataclass
class Launch:
    """A start planned once (given: the user's config; start: the store, the cap, the planned config) and its
    session, started on first use.

    Lazily: a refusal that needs no Spark (a foreign checkpoint, a wrong sink) costs no JVM. A lent session (the
    caller's, a notebook's) gets the planned settings for the launch's duration and its own back afterwards.
    """

    given: TidemarkConfig
    start: StartPlan
    _lent: SparkSession | None
    _stack: ExitStack
    _session: SparkSession | None = field(default=None, init=False)
    _pipeline: PipelineContext | None = field(default=None, init=False)

    @property
    def config(self) -> TidemarkConfig:
        """The planned config: the user's, with the state store and cap the start chose."""
        return self.start.config

    @property
    def pipeline(self) -> PipelineContext:
        """The planned config's context (its sink, source and locations), resolved once for the launch."""
        if self._pipeline is None:
            self._pipeline = PipelineContext.of(self.config)
        return self._pipeline

    def session(self) -> SparkSession:
        """The launch's session (the one route: needs.pipeline_session), started or lent on first use."""
        if self._session is None:
            self._session = self._stack.enter_context(pipeline_session(self.config, self._lent))
        return self._session

    def locate_sink(self) -> None:
        """An output only the session can locate (a Delta table's name whose checkpoint, which recorded its folder,
        was lost) looked up through this launch's session: both configs then carry its location."""
        from dataclasses import replace

        sink = self.pipeline.sink
        if sink.unresolved() is None:
            return
        located = sink.located(self.session())
        # Only the sink's section changes: the user's config gets the folder the planned one found.
        self.given = self.given.model_copy(update={"sink": located.sink})
        self.start = replace(self.start, config=located)
        self._pipeline = None  # its sink is the located config's now


@dataclass(frozen=True)
class JarsFetch:
    """How a command fetches a new session's jars in front of its user: the progress bar, and the command to name
    where fetching fails (`tidemark jars fetch CONFIG`)."""

    progress: Progress | None
    hint: str


@contextmanager
def launched(config: TidemarkConfig, spark: SparkSession | None = None) -> Iterator[Launch]:
    """Plan the start once (the store and cap sized); its session starts on first use."""
    start = store_start.plan_start(config)
    with ExitStack() as stack:
        yield Launch(config, start, spark, stack)


@dataclass(frozen=True)
class StartPoint:
    """What the query starts as: the planned config's context (a replay's: with its filter and start offsets) and
    the event time a recovered checkpoint replays from (None: a plain run)."""

    pipeline: PipelineContext
    replay_from: datetime | None = None

    @property
    def config(self) -> TidemarkConfig:
        """The config the query runs."""
        return self.pipeline.config


class Prestart(Protocol):
    """A step of `tidemark run` around the query from a package above pipeline/: the restart check (evolve/),
    failover (recovery/). `before` may refuse in one line (raise) or change where the query starts; `after` runs
    once the query stopped."""

    def before(self, launch: Launch, point: StartPoint) -> StartPoint:
        """The start to run (point, or a replay's), after this step's checks and repairs."""
        ...

    def after(self, launch: Launch, result: RunResult) -> None:
        """What this step finishes once the run returned."""
        ...
