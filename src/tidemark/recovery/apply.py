"""Apply a recovery plan: archive, replay from the resume point into a fresh checkpoint, repair the sink log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.checkpoint.sink import read_log
from tidemark.config import TidemarkConfig
from tidemark.recovery.archive import finish_interrupted, perform, pipeline_locations
from tidemark.recovery.marker import RecoveryMarker, finish_pending, write_marker
from tidemark.recovery.plan import RecoveryPlan, ensure_not_running
from tidemark.recovery.replay import replay_config
from tidemark.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.pipeline.run import RunResult


@dataclass(frozen=True)
class Verification:
    """Rows and duplicate (key, window) rows as a plain Parquet reader and as Spark see the sink."""

    parquet_rows: int
    parquet_duplicates: int
    spark_rows: int | None
    spark_duplicates: int | None

    @property
    def ok(self) -> bool:
        """True when no reader sees a (key, window) twice and both see the same rows."""
        spark_ok = self.spark_rows is None or (self.spark_duplicates == 0 and self.spark_rows == self.parquet_rows)
        return self.parquet_duplicates == 0 and spark_ok


@dataclass(frozen=True)
class RecoveryResult:
    """What an applied recovery did."""

    plan: RecoveryPlan
    applied: bool
    replay: RunResult | None
    injected_files: int | None  # None: no batch committed yet; the next run adds them
    verification: Verification | None


def archive_and_mark(config: TidemarkConfig, plan: RecoveryPlan) -> None:
    """Move everything aside and leave a fresh checkpoint that carries the resume point.

    The marker is written first into the archive plan's journal order: the moves are journaled, so a crash
    part-way is finished by the next `recover --apply` or `run`, and the marker follows once they are done.
    """
    paths = pipeline_locations(config)
    ensure_not_running(paths.checkpoint)
    log = read_log(open_storage(paths.sink))
    entries = tuple(log.files[p] for p in plan.surviving_files if p in log.files)
    marker = RecoveryMarker(plan.resume_from, plan.archive, entries, injected=False)
    # Kept in the archive too: a crash after the checkpoint moved but before the marker was written
    # leaves the resume point where the next run looks for it.
    open_storage(plan.archive).write_atomic("recovery.json", marker.to_json().encode("utf-8"))
    perform(list(plan.moves), paths, "recovery")
    write_marker(paths.checkpoint, marker)


def verify_sink(config: TidemarkConfig, spark: SparkSession | None) -> Verification:
    """Count rows and duplicate (key, window) rows with pyarrow and, given a session, with Spark."""
    import pyarrow.dataset as ds

    location = pipeline_locations(config).sink
    sink = location.uri
    filesystem, base = open_storage(location).arrow()
    group = [*config.aggregation.key, "windowStart", "windowEnd"]
    dataset = ds.dataset(base, format="parquet", partitioning="hive", filesystem=filesystem)
    table = dataset.to_table(columns=group)
    frame: Any = table.to_pandas()
    parquet_dups = int(frame.duplicated(group).sum())
    spark_rows = spark_dups = None
    if spark is not None:
        from pyspark.sql import functions as F

        read = spark.read.parquet(sink)
        spark_rows = read.count()
        spark_dups = read.groupBy(*group).count().where(F.col("count") > 1).count()
    return Verification(len(frame), parquet_dups, spark_rows, spark_dups)


def apply_recovery(config: TidemarkConfig, plan: RecoveryPlan, spark: SparkSession) -> RecoveryResult:
    """Archive, replay (available-now) from the resume point, add the surviving files to the new log, verify."""
    from tidemark.pipeline.run import run_pipeline

    archive_and_mark(config, plan)
    paths = pipeline_locations(config)
    replay = run_pipeline(
        replay_config(config, plan.resume_from), available_now=True, spark=spark, replay_from=plan.resume_from
    )
    injected = finish_pending(paths.checkpoint, paths.sink)
    verification = verify_sink(config, spark) if read_log(open_storage(paths.sink)).exists else None
    return RecoveryResult(plan, True, replay, injected, verification)


def recover_pipeline(
    config: TidemarkConfig, *, apply: bool = False, per_key: bool = False, spark: SparkSession | None = None
) -> RecoveryResult:
    """Plan a recovery from the sink (and, with apply, carry it out); the one entry point of the CLI."""
    from tidemark.recovery.plan import plan_recovery
    from tidemark.recovery.replay import check_replayable, newest_landing_event
    from tidemark.session import session_for

    check_replayable(config)
    paths = pipeline_locations(config)
    if apply:
        finish_interrupted(paths)
    session = spark or session_for(config)
    plan = plan_recovery(config, newest_landing_event(session, config), per_key=per_key)
    if not apply:
        return RecoveryResult(plan, False, None, None, None)
    return apply_recovery(config, plan, session)
