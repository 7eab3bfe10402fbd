"""Adaptive catch-up of a Kafka backlog: how many offsets one micro-batch should read (pure arithmetic).

The backlog is the records between the committed offsets and the broker's end offsets (the source's lag,
`KafkaSource.records_behind`); the throughput is records per second, fitted on the pipeline's recent batches.
Spark's `maxOffsetsPerTrigger` gets the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from tidemark.config import TidemarkConfig
from tidemark.sources.catchup import Throughput, batches_phrase

# Without a measured history: records per second one task slot reads from Kafka, parses (JSON) and aggregates.
# Measured with benchmarks/kafka_pipeline.py (1 M small JSON records, local[2]) at about 40,000 records/s per slot
# in one large batch; a quarter of it keeps a first guess on the short side of the target.
DEFAULT_RECORDS_PER_SECOND_PER_SLOT = 10_000


@dataclass(frozen=True)
class KafkaCatchUpPlan:
    """How one phase of a run reads a Kafka backlog: catch-up batches of `offsets_per_trigger`, or off."""

    active: bool
    reason: str
    backlog_records: int  # end offsets minus committed offsets, over every partition
    steady_offsets_per_trigger: int | None  # [source] max_offsets_per_trigger
    offsets_per_trigger: int | None  # what this phase gives Spark's maxOffsetsPerTrigger
    expected_batches: int
    expected_batch_ms: float
    target_batch_ms: float
    throughput_records_per_second: float
    fixed_batch_ms: float
    throughput_origin: str

    def describe(self) -> str:
        """One line for the run's log."""
        rate = f"{self.throughput_records_per_second:,.0f} records/s from {self.throughput_origin}"
        if not self.active:
            return f"catch-up: off ({self.reason}); {self.backlog_records:,} records waiting"
        return f"catch-up: {self.reason} (about {self.expected_batch_ms / 1000:.0f} s per batch at {rate})"

    def phase_config(self, config: TidemarkConfig) -> TidemarkConfig:
        """The config with the plan's offsets per trigger as `[source] max_offsets_per_trigger`."""
        source = config.source.model_copy(update={"max_offsets_per_trigger": self.offsets_per_trigger})
        return config.model_copy(update={"source": source})

    def spark_conf(self, config: TidemarkConfig) -> dict[str, str]:
        """Nothing: a Kafka catch-up query needs no settings of its own."""
        del config
        return {}


def default_record_throughput(task_slots: int) -> Throughput:
    """The first guess for a Kafka pipeline without history (records, not bytes)."""
    rate = DEFAULT_RECORDS_PER_SECOND_PER_SLOT * max(1, task_slots)
    return Throughput(rate, 0.0, 0, f"default estimate ({task_slots} task slots x 10,000 records/s)")


def plan_kafka_catch_up(
    backlog: int, steady: int | None, target: timedelta, throughput: Throughput
) -> KafkaCatchUpPlan:
    """Size Kafka catch-up batches: as many records as the measured throughput reads in the target duration.

    Spark's maxOffsetsPerTrigger spreads the limit over the partitions by their lag, so a batch holds about the
    limit whichever partitions are behind.
    """
    target_ms = target.total_seconds() * 1000
    per_batch = int(max(0.0, throughput.bytes_per_second * (target_ms - throughput.fixed_ms) / 1000))

    def plan(active: bool, reason: str, limit: int | None) -> KafkaCatchUpPlan:
        size = limit or backlog or 1
        batches = -(-backlog // size) if backlog else 0
        return KafkaCatchUpPlan(
            active=active,
            reason=reason,
            backlog_records=backlog,
            steady_offsets_per_trigger=steady,
            offsets_per_trigger=limit,
            expected_batches=batches,
            expected_batch_ms=throughput.batch_ms(min(size, backlog)) if backlog else 0.0,
            target_batch_ms=target_ms,
            throughput_records_per_second=throughput.bytes_per_second,
            fixed_batch_ms=throughput.fixed_ms,
            throughput_origin=throughput.origin,
        )

    if backlog == 0:
        return plan(False, "no backlog", steady)
    if steady is None:
        return plan(False, f"without max_offsets_per_trigger Spark reads the {backlog:,} records in one batch", None)
    if backlog <= steady:
        return plan(False, f"the backlog of {backlog:,} records fits one steady-state batch", steady)
    if per_batch <= steady:
        return plan(False, f"the target batch duration allows no more than the steady-state {steady:,}", steady)
    batches = -(-backlog // per_batch)
    balanced = -(-backlog // batches)
    return plan(True, f"catching up {backlog:,} records in {batches_phrase(batches)} of up to {balanced:,}", balanced)
