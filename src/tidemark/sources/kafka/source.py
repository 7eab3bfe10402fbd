"""Kafka, and Azure Event Hubs through its Kafka endpoint, read by Spark's Kafka connector."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from tidemark.config import KAFKA_FORMATS, SourceFormat, TidemarkConfig
from tidemark.sources.base import (
    BatchInput,
    RawStream,
    ReplayStart,
    Source,
    SourcePosition,
    SourceStart,
)
from tidemark.sources.capabilities import CatchesUp, Replayable, ReportsLag
from tidemark.spark.artifacts import JarFeature

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.formats import Checkpoint, OffsetEntry
    from tidemark.formats.kafka_offsets import Offsets
    from tidemark.sources.catchup import CatchUpContext
    from tidemark.sources.kafka.catchup import KafkaCatchUpPlan

_START_OPTIONS = ("startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy")


class KafkaSource(Replayable, CatchesUp, ReportsLag, Source):
    """The topics a `[source]` subscribes to, on a Kafka broker or an Event Hubs namespace."""

    formats: ClassVar[frozenset[SourceFormat]] = frozenset(KAFKA_FORMATS)
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset({JarFeature.KAFKA})
    helper: ClassVar[bool] = True
    origin_names_record: ClassVar[bool] = True

    def check(self) -> None:
        from tidemark.sources.kafka.options import kafka_access

        kafka_access(self.config)  # reads the connection string or secret options: a missing one is named now

    def stream(self, spark: SparkSession) -> RawStream:
        from tidemark.sources.kafka.frames import kafka_frame, kafka_options

        return kafka_frame(spark, self.config, kafka_options(self.config), batch=False)

    def committed_inputs(self, checkpoint: Checkpoint, batches: list[int]) -> dict[int, BatchInput]:
        from tidemark.sources.kafka.committed import batch_range

        entries: dict[int, OffsetEntry | None] = {}

        def find(batch: int) -> OffsetEntry | None:  # each entry read once (a batch's range needs the one before)
            if batch not in entries:
                entries[batch] = checkpoint.find_offset(batch)
            return entries[batch]

        found = {}
        for batch in batches:
            entry = find(batch)
            if entry is None:
                continue
            span = batch_range(checkpoint, batch, find)
            names = tuple(json.dumps(o) for o in entry.source_offsets)
            found[batch] = BatchInput(batch, names, *(span or (None, None)))
        return found

    def read_input(self, spark: SparkSession, batch: BatchInput) -> RawStream | None:
        from tidemark.sources.kafka.frames import read_kafka_range

        return None if batch.end is None else read_kafka_range(spark, self.config, batch.start, batch.end)

    def records_behind(self, spark: SparkSession) -> int:
        """Records between the checkpoint's committed offsets and the broker's end offsets (the source's lag)."""
        from tidemark.sources.kafka.start import kafka_backlog

        return kafka_backlog(spark, self.config)

    def catch_up_gap(self, spark: SparkSession | None) -> str | None:
        return None if spark is not None else "catch-up sizing asks the broker through a Spark session"

    def plan_catch_up(self, spark: SparkSession | None, context: CatchUpContext) -> tuple[KafkaCatchUpPlan, None]:
        """Measure the backlog (the broker's end offsets against the checkpoint) and size maxOffsetsPerTrigger."""
        from tidemark.sources.catchup import fit_throughput
        from tidemark.sources.kafka.catchup import default_record_throughput, plan_kafka_catch_up

        assert spark is not None  # catch_up_gap said so
        samples = [(p.num_input_rows, float(p.batch_duration_ms)) for p in context.history]
        throughput = fit_throughput(samples) or default_record_throughput(context.task_slots)
        backlog = self.records_behind(spark)
        steady = self.config.source.max_offsets_per_trigger
        return plan_kafka_catch_up(backlog, steady, context.target, throughput), None

    def check_start(self, spark: SparkSession) -> SourceStart:
        from tidemark.sources.kafka.offsets import describe_lost
        from tidemark.sources.kafka.start import check_kafka_start

        start = check_kafka_start(spark, self.config)  # one line for a broker, topic or data-loss problem
        ranges = tuple(
            {
                "topic": r.partition.topic,
                "partition": r.partition.partition,
                "first": r.first,
                "last": r.available_from - 1,
            }
            for r in start.lost
        )
        warning = (
            f"DATA_LOSS: {describe_lost(start.lost)} were removed from Kafka before this pipeline read them "
            f"({start.lost_records:,} offsets); going on without them (fail_on_data_loss = false)"
            if start.lost
            else ""
        )
        return SourceStart(start.endpoint, start.lost_records, ranges, warning)

    def describe_failure(self, spark: SparkSession, text: str) -> str | None:
        from tidemark.sources.kafka.start import describe_kafka_failure

        return describe_kafka_failure(spark, self.config, text)

    def missing_connector(self, failure: str) -> str | None:
        from tidemark.sources.kafka.frames import kafka_missing

        return kafka_missing() if "Failed to find data source: kafka" in failure else None

    def restartable_failure(self, failure: str) -> str | None:
        """Spark 4.1's Kafka source reports its progress metrics from offsets only planning fetches; the batch a
        restart re-runs from the offset log is not planned, and its progress fails with a NullPointerException
        after the batch committed (KafkaMicroBatchStream.metrics wraps a null in Some; Spark 4.2 fixed it). The
        next query plans its batches and reports them normally."""
        from tidemark.spark.lines import Defect, has_defect

        signs = ('Option.get()" is null' in failure and "IterableOps.map" in failure) or (
            "KafkaMicroBatchStream" in failure and "metrics" in failure and "NullPointerException" in failure
        )
        if not (signs and has_defect(Defect.KAFKA_METRICS_AFTER_RESTART)):
            return None
        return f"{Defect.KAFKA_METRICS_AFTER_RESTART}; the re-run batch committed, starting the query again"

    def replay_start(self, spark: SparkSession, resume_from: Callable[[], datetime]) -> ReplayStart:
        from tidemark.sources.kafka.replay import replay_start

        return replay_start(spark, self.config, resume_from())

    def newest_event(self, spark: SparkSession, start: ReplayStart) -> datetime | None:
        from tidemark.formats.kafka_offsets import parse_offsets
        from tidemark.sources.kafka.replay import newest_kafka_event

        return newest_kafka_event(spark, self.config, parse_offsets(start.offsets or "") or {})

    def replay_config(self, start: str | None) -> TidemarkConfig:
        """The plan's per-partition start offsets (or the earliest) instead of the config's starting position."""
        source = self.config.source
        options = {k: v for k, v in source.options.items() if k not in _START_OPTIONS}
        replayed = source.model_copy(update={"options": options, "starting_offsets": start or "earliest"})
        return self.config.model_copy(update={"source": replayed})

    def describe_replay(self, resume_from: datetime, start: ReplayStart | None) -> str:
        if start is None:
            subscription = self.config.source.subscription
            return f"Kafka {subscription} from per-partition start offsets, {self._keeping(resume_from)}"
        from tidemark.sources.kafka.replay import describe_kafka_replay

        return describe_kafka_replay(self.config, resume_from, start)

    def adoption_position(
        self, spark: SparkSession | None, old: Checkpoint, batch: int, resume_from: datetime
    ) -> SourcePosition | None:
        from tidemark.errors import InputError
        from tidemark.sources.kafka.replay import adoption_position

        if spark is None:
            return None  # read through the broker, so only with a session
        position = adoption_position(spark, self.config, old, batch, resume_from)
        if position is None:
            msg = (
                f"tidemark adopt refused: the old job's offsets/{batch} holds no Kafka offsets of one source: it did "
                "not read Kafka alone. Nothing was changed"
            )
            raise InputError(msg)
        return position

    def live_offsets(self, spark: SparkSession) -> tuple[Offsets, Offsets, str]:
        from tidemark.sources.kafka.admin import all_partitions, kafka_admin
        from tidemark.sources.kafka.options import kafka_access

        access = kafka_access(self.config)
        with kafka_admin(spark, access, self.config.source.connect_timeout) as admin:
            # The subscribed topics' partitions now (one the checkpoint names that is gone cannot be asked for).
            wanted = set(all_partitions(admin.subscribed()))
            return admin.earliest(wanted), admin.latest(wanted), access.endpoint.describe()
