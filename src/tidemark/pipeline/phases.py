"""The phases of a run: catch-up queries sized from the backlog, then the steady-state query.

Spark reads `maxFilesPerTrigger` once, when a query starts. So a run that is behind starts an available-now
query with the catch-up size, which reads exactly the files present at its start and stops; a processing-time
run then plans again (files may have arrived meanwhile) and finally starts its steady-state query with
`[source] max_files_per_trigger`. The watermark, state and sink log carry over between the queries through the
checkpoint, as they do across any restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.errors import TidemarkError
from tidemark.monitor.watchdog import default_stuck_after
from tidemark.pipeline.backlog import (
    batch_samples,
    files_of_batches,
    peak_state_bytes,
    read_backlog,
    recent_progress,
    supports_backlog,
)
from tidemark.pipeline.catchup import (
    CatchUpPlan,
    FileSplit,
    KafkaCatchUpPlan,
    default_record_throughput,
    default_throughput,
    fit_throughput,
    memory_ceiling_bytes,
    plan_catch_up,
    plan_kafka_catch_up,
)
from tidemark.plan.load import conf_from_config
from tidemark.sizes import format_size
from tidemark.sources import BacklogKind, source_of
from tidemark.storage.uri import parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A backlog that refills faster than catch-up drains it still gets the steady-state query after this many.
MAX_CATCH_UP_PHASES = 5
MAX_PARTITION_BYTES_KEY = "spark.sql.files.maxPartitionBytes"
OPEN_COST_KEY = "spark.sql.files.openCostInBytes"
# Above this many paths Spark lists a batch's files with a distributed job (about 0.2 s for 40 local files).
LISTING_THRESHOLD_KEY = "spark.sql.sources.parallelPartitionDiscovery.threshold"
SPARK_LISTING_THRESHOLD = 32
# Settings that decide Spark's split besides tidemark's: with any of them set, tidemark leaves it alone.
_SPLIT_KEYS = (
    MAX_PARTITION_BYTES_KEY,
    OPEN_COST_KEY,
    "spark.sql.files.minPartitionNum",
    "spark.sql.files.maxPartitionNum",
    "spark.sql.leafNodeDefaultParallelism",
    "spark.default.parallelism",
)
# Compression that makes a text file one read task (Hadoop's non-splittable codecs; bzip2 splits).
_WHOLE_FILE_CODECS = (".gz", ".deflate", ".zst", ".zstd", ".lz4", ".snappy", ".br")


@dataclass(frozen=True)
class RunPhase:
    """One streaming query of a run: its config (with the files per trigger it uses) and trigger."""

    config: TidemarkConfig
    available_now: bool
    plan: CatchUpPlan | KafkaCatchUpPlan | None  # the plan that chose it; None when catch-up is off

    @property
    def spark_conf(self) -> dict[str, str]:
        """Settings for this query only: the catch-up's balanced file split, and its file listing.

        A catch-up batch hands Spark more files than the steady one; past 32, Spark stats them with a
        distributed job of one task per file. On a local disk the driver does that faster itself; on object
        stores, where each stat is a request, the parallel job stays.
        """
        if not isinstance(self.plan, CatchUpPlan) or not self.plan.active:
            return {}
        conf: dict[str, str] = {}
        if self.plan.split_bytes is not None:
            conf[MAX_PARTITION_BYTES_KEY] = str(self.plan.split_bytes)
        files = self.plan.files_per_trigger or 0
        local = self.config.source.path is not None and parse_location(self.config.source.path).is_local
        if local and files > SPARK_LISTING_THRESHOLD and LISTING_THRESHOLD_KEY not in self.config.spark.conf:
            conf[LISTING_THRESHOLD_KEY] = str(files)
        return conf


def file_split(config: TidemarkConfig, files: Sequence[str] = ()) -> FileSplit | None:
    """How Spark will cut these files into tasks; None when tidemark should not choose the split.

    Not chosen: when [spark.conf] sets the split or what Spark divides it by, and for Parquet, whose work
    follows row groups rather than byte ranges.
    """
    if any(key in config.spark.conf for key in _SPLIT_KEYS) or not source_of(config).splits_by_bytes():
        return None
    multi_line = str(config.source.options.get("multiLine", "false")).lower() == "true"
    whole_file_codec = any(name.lower().endswith(_WHOLE_FILE_CODECS) for name in files)
    return FileSplit(splittable=not (multi_line or whole_file_codec))


def plan_for(config: TidemarkConfig) -> tuple[CatchUpPlan, frozenset[object]]:
    """Measure the backlog and the throughput now; return the plan and the pending files' identities."""
    assert config.trigger.target_batch_duration is not None
    backlog = read_backlog(config)
    history = recent_progress(config.monitor_dir, backlog.query_id)
    conf = conf_from_config(config)
    files = files_of_batches(config.checkpoint.location, [p.batch_id for p in history])
    samples = batch_samples(history, files, backlog.sizes_by_key)
    throughput = fit_throughput(samples) or default_throughput(conf.executors * conf.cores)
    ceiling = memory_ceiling_bytes(conf, peak_state_bytes(history), source_of(config).expansion())
    # A catch-up batch must not look stuck to the watchdog: at most half its limit.
    stuck_after = default_stuck_after(config.trigger.interval, config.monitor.stuck_after)
    target = min(config.trigger.target_batch_duration, stuck_after / 2)
    sizes = [f.size for f in backlog.pending]
    slots = conf.executors * conf.cores
    split = file_split(config, [f.key[2] for f in backlog.pending])
    plan = plan_catch_up(sizes, config.source.max_files_per_trigger, target, throughput, ceiling, slots, split)
    return plan, frozenset(f.key for f in backlog.pending)


def describe(plan: CatchUpPlan | KafkaCatchUpPlan) -> str:
    """One line for the run's log."""
    if isinstance(plan, KafkaCatchUpPlan):
        rate = f"{plan.throughput_records_per_second:,.0f} records/s from {plan.throughput_origin}"
        if not plan.active:
            return f"catch-up: off ({plan.reason}); {plan.backlog_records:,} records waiting"
        return f"catch-up: {plan.reason} (about {plan.expected_batch_ms / 1000:.0f} s per batch at {rate})"
    rate = f"{format_size(plan.throughput_bytes_per_second)}/s from {plan.throughput_origin}"
    split = f"; read tasks of {format_size(plan.split_bytes)}" if plan.split_bytes else ""
    if not plan.active:
        return f"catch-up: off ({plan.reason}); {plan.backlog_files} files, {format_size(plan.backlog_bytes)} waiting"
    return (
        f"catch-up: {plan.reason} ({format_size(plan.backlog_bytes)}; limited by {plan.limited_by.value}, "
        f"about {plan.expected_batch_ms / 1000:.0f} s per batch at {rate}; memory ceiling "
        f"{format_size(plan.memory_ceiling_bytes)} per batch{split})"
    )


def with_files_per_trigger(config: TidemarkConfig, files: int | None) -> TidemarkConfig:
    """The config with another `[source] max_files_per_trigger`."""
    source = config.source.model_copy(update={"max_files_per_trigger": files})
    return config.model_copy(update={"source": source})


def with_offsets_per_trigger(config: TidemarkConfig, offsets: int | None) -> TidemarkConfig:
    """The config with another `[source] max_offsets_per_trigger`."""
    source = config.source.model_copy(update={"max_offsets_per_trigger": offsets})
    return config.model_copy(update={"source": source})


def kafka_plan_for(spark: SparkSession, config: TidemarkConfig) -> KafkaCatchUpPlan:
    """Measure a Kafka backlog (the broker's end offsets against the checkpoint) and the throughput now."""
    from tidemark.formats import Checkpoint

    assert config.trigger.target_batch_duration is not None
    checkpoint = Checkpoint.open(config.checkpoint.location)
    query_id = checkpoint.query_id() if checkpoint.exists() else None
    history = recent_progress(config.monitor_dir, query_id)
    samples = [(p.num_input_rows, float(p.batch_duration_ms)) for p in history]
    conf = conf_from_config(config)
    throughput = fit_throughput(samples) or default_record_throughput(conf.executors * conf.cores)
    stuck_after = default_stuck_after(config.trigger.interval, config.monitor.stuck_after)
    target = min(config.trigger.target_batch_duration, stuck_after / 2)
    backlog = source_of(config).records_behind(spark)
    return plan_kafka_catch_up(backlog, config.source.max_offsets_per_trigger, target, throughput)


def _record_phases(
    spark: SparkSession,
    config: TidemarkConfig,
    available_now: bool,
    on_plan: Callable[[CatchUpPlan | KafkaCatchUpPlan], None] | None,
) -> Iterator[RunPhase]:
    """Catch-up of a source measured in records (Kafka): an available-now query with maxOffsetsPerTrigger sized
    from the backlog, then steady."""
    for _ in range(MAX_CATCH_UP_PHASES):
        try:
            plan = kafka_plan_for(spark, config)
        except TidemarkError as exc:
            log.warning("catch-up: cannot measure the Kafka backlog (%s); reading it at the steady-state size", exc)
            break
        if on_plan is not None:
            on_plan(plan)
        log.info("%s", describe(plan))
        if not plan.active:
            if available_now:
                yield RunPhase(config, True, plan)
                return
            break
        yield RunPhase(with_offsets_per_trigger(config, plan.offsets_per_trigger), True, plan)
        if available_now:
            return
    yield RunPhase(config, available_now, None)


def run_phases(
    config: TidemarkConfig,
    available_now: bool,
    on_plan: Callable[[CatchUpPlan | KafkaCatchUpPlan], None] | None = None,
    spark: SparkSession | None = None,
) -> Iterator[RunPhase]:
    """The queries a run starts, one at a time; the caller stops asking when a query fails or the run must stop."""
    backlog = source_of(config).backlog
    if config.trigger.target_batch_duration is not None and backlog is BacklogKind.RECORDS and spark is not None:
        yield from _record_phases(spark, config, available_now, on_plan)
        return
    if config.trigger.target_batch_duration is None or supports_backlog(config) is not None:
        yield RunPhase(config, available_now, None)
        return
    previous: frozenset[object] | None = None
    for _ in range(MAX_CATCH_UP_PHASES):
        try:
            plan, pending = plan_for(config)
        except (TidemarkError, OSError) as exc:
            log.warning("catch-up: cannot measure the backlog (%s); reading it at the steady-state size", exc)
            break
        # A catch-up query that took none of the files it was planned for (options tidemark does not model,
        # such as pathGlobFilter or maxFileAge) must not be planned again.
        stalled = previous is not None and previous <= pending
        if on_plan is not None:
            on_plan(plan)
        log.info("%s", describe(plan))
        if not plan.active or stalled:
            if available_now:  # the first plan of an available-now run, inactive (it never stalls)
                yield RunPhase(config, True, plan)
                return
            break
        previous = pending
        yield RunPhase(with_files_per_trigger(config, plan.files_per_trigger), True, plan)
        if available_now:
            return
    yield RunPhase(config, available_now, None)
