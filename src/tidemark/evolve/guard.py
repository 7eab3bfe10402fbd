"""The refusals built on `tidemark check`: before `run` (a checkpoint this config cannot continue), before a
recovery's moves (the checkpoint another query wrote) and before `adopt` (a config that does not describe the old
job), each in one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext
from tidemark.evolve.check import CheckReport, check_config
from tidemark.formats import Checkpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.pipeline.run import RunResult
    from tidemark.pipeline.start import Launch, StartPoint


def require_restartable(
    config: TidemarkConfig,
    config_path: str,
    *,
    allow: frozenset[str] = frozenset(),
    spark: SparkSession | None = None,
    launch: Launch | None = None,
) -> CheckReport | None:
    """Before `run` touches anything: refuse, in one line, a checkpoint location that holds something else or a
    checkpoint `tidemark check` rejects for this config. None when the query starts fresh.

    launch: the run's planned start; its session (started here when the check needs Spark) is the one the run
    then uses, with the store and RocksDB cap the run planned (the cap is one per JVM and the first store opened
    sets it), and the state is read with them. spark: a session to check on (planned here otherwise).
    """
    from tidemark.errors import CheckpointError
    from tidemark.formats import finish_checkpoint_swaps, refuse_foreign
    from tidemark.pipeline.sink_check import require_matching_sink
    from tidemark.pipeline.start import launched

    if launch is None:  # a run's launch comes after run_pipeline finished them
        finish_checkpoint_swaps(config.checkpoint.location)  # a repartition killed during its swap, finished first
    checkpoint = Checkpoint.open(config.checkpoint.location)
    refuse_foreign(checkpoint.store)
    require_matching_sink(
        launch.pipeline if launch is not None else PipelineContext.of(config),
        "tidemark run",
        "write to a new [sink] path, or see docs/adopt.md to continue another job's sink",
    )
    if not checkpoint.exists() or not checkpoint.commit_batches():
        return None
    if spark is not None:
        report = check_config(config, config_path, allow=allow, spark=spark)
    elif launch is not None:
        report = check_config(config, config_path, allow=allow, spark=launch.session(), read_with=launch.config)
    else:
        with launched(config) as own:
            report = check_config(config, config_path, allow=allow, spark=own.session(), read_with=own.config)
    blocking = [p for p in report.problems if p.blocking]
    if blocking or not report.compatible:
        first = blocking[0] if blocking else None
        more = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
        what = f"{first.code}: {first.message}{more}; fix: {first.fix}" if first else "the rehearsal failed"
        msg = (
            f"{config_path} cannot continue the checkpoint at {checkpoint.uri}: {what}. Nothing was run; "
            f"'tidemark check {config_path}' lists every difference"
        )
        raise CheckpointError(msg)
    return report


@dataclass(frozen=True)
class RestartCheck:
    """`tidemark run`'s restart check as a step of the run (a pipeline.start.Prestart): require_restartable on the
    run's planned start, before failover or the query touch anything."""

    config_path: str
    allow: frozenset[str] = frozenset()

    def before(self, launch: Launch, point: StartPoint) -> StartPoint:
        """point unchanged, once the checkpoint passed (a refusal is one line)."""
        require_restartable(launch.given, self.config_path, allow=self.allow, launch=launch)
        return point

    def after(self, launch: Launch, result: RunResult) -> None:
        """Nothing: the check is done before the query."""
        del launch, result


@dataclass(frozen=True)
class SameQuery:
    """`tidemark recover`'s precheck on the recovery's launch: require_same_query read with the launch's session and
    planned config (the RocksDB cap the replay runs with)."""

    config: TidemarkConfig
    config_path: str

    def __call__(self, launch: Launch) -> None:
        """Refuse, in one line, a checkpoint another query wrote."""
        require_same_query(self.config, self.config_path, launch.session(), read_with=launch.config)


def require_same_query(
    config: TidemarkConfig, config_path: str, spark: SparkSession, read_with: TidemarkConfig | None = None
) -> None:
    """Before `recover` replaces a readable checkpoint: refuse one `tidemark check` says another query wrote.

    An unreadable checkpoint passes: replacing it is what recovery is for. read_with: the planned start's config
    (the state is read with the RocksDB cap the replay runs with).
    """
    from tidemark.errors import CheckpointError

    checkpoint = Checkpoint.open(config.checkpoint.location)
    try:
        if not checkpoint.exists() or not checkpoint.commit_batches():
            return
        if not checkpoint.scan().operators:
            return  # committed batches but no state at all: a damaged checkpoint, what recovery replaces
        report = check_config(config, config_path, spark=spark, read_with=read_with)
    except CheckpointError:
        return
    blocking = [p for p in report.problems if p.blocking and p.code in _OTHER_QUERY]
    if blocking:
        first = blocking[0]
        msg = (
            f"tidemark recover refused: the checkpoint at {checkpoint.uri} was written by another query than "
            f"{config_path} describes ({first.code}: {first.message}). Nothing was changed; fix the config, or "
            "see docs/adopt.md to move another job over"
        )
        raise CheckpointError(msg)


# Differences that mean the checkpoint is another query's (recover would replace it with this config's).
_OTHER_QUERY = frozenset(
    {"OPERATORS_CHANGED", "KEY_SCHEMA", "VALUE_SCHEMA", "KEY_COLUMNS", "STATE_VARIABLES", "TIME_MODE"}
)


# What makes another job's checkpoint describe the same query as a config, for a cut-over to a new checkpoint:
# the state's shape follows from these; the store, partitions and format of the old checkpoint do not matter.
_SAME_JOB = frozenset({"OPERATORS_CHANGED", "KEY_SCHEMA", "KEY_COLUMNS", "WATERMARK", "WINDOW", "SESSION_GAP"})


def require_describes_old_job(
    config: TidemarkConfig,
    config_path: str,
    old_checkpoint: str,
    spark: SparkSession,
    read_with: TidemarkConfig | None = None,
) -> None:
    """Before `adopt` writes anything: refuse a config that does not describe the old job (its grouping columns,
    window, watermark), compared with the old job's state as `tidemark check` compares a checkpoint."""
    from tidemark.errors import InputError

    location = config.checkpoint.model_copy(update={"location": old_checkpoint})
    report = check_config(
        config.model_copy(update={"checkpoint": location}),
        config_path,
        spark=spark,
        key_order_matters=False,
        read_with=read_with,
    )
    different = [p for p in report.problems if p.code in _SAME_JOB]
    if different:
        first = different[0]
        more = f" (and {len(different) - 1} more)" if len(different) > 1 else ""
        msg = (
            f"tidemark adopt refused: {config_path} does not describe the job that wrote {old_checkpoint}: "
            f"{first.code}: {first.message}{more}. Nothing was changed; make the config match the old job"
        )
        raise InputError(msg)
