"""The Parquet file sink: Spark's file sink with its `_spark_metadata` log, partitioned by window start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import AggregationKind, SinkFormat
from tidemark.sinks.base import BatchHook, HeldWindows, Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

DYNAMIC_ALLOCATION_KEY = "spark.dynamicAllocation.enabled"


class ParquetSink(Sink):
    """Parquet files, committed per batch in the sink's metadata log; every exactly-once tool vouches for it."""

    format: ClassVar[SinkFormat] = SinkFormat.PARQUET
    lost_checkpoint_risk: ClassVar[str] = "skip its first batches as already committed (Spark's file sink log)"

    def writers(self, task_slots: int) -> int | None:
        """How many tasks run the stage that writes a batch's Parquet output; None leaves Spark's plan.

        Each writing task writes one file into every output partition its rows fall in, so with Spark's plan a
        batch that closes windows writes (state partitions x windows) small files, and the batch that emits a
        caught-up backlog spends most of its time opening and closing them. Window and session aggregations
        write through `coalesce` instead: `[sink] writers` tasks, by default one per task slot (a coalesce never
        adds partitions). Coalesce is narrow, so the whole stage after the shuffle (state restore, merge, state
        save, write) runs in that many tasks. Under dynamic allocation the slots are not known at start: Spark's
        plan stays unless `writers` is set. Per-key logic (kind "custom") keeps Spark's plan: its state operator
        runs Python workers per partition, which this has not been verified with.
        """
        config = self.config
        if config.aggregation.kind is AggregationKind.CUSTOM:
            return None
        if config.sink.writers is not None:
            return config.sink.writers
        if str(config.spark_conf().get(DYNAMIC_ALLOCATION_KEY, "false")).lower() == "true":
            return None
        return max(1, task_slots)

    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """Spark's file sink at the path, partitioned as the config says, with the log retention it asks."""
        del output
        writer = writer.format("parquet").option("path", self.path or "")
        if self.config.partition_by:
            writer = writer.partitionBy(*self.config.partition_by)
        if self.config.sink.retention:
            writer = writer.option("retention", self.config.sink.retention)
        return writer

    def recover_gap(self) -> str | None:
        """Recovery moves a Parquet sink's rewritten windows aside by their `windowStart=` partition folders."""
        if "windowStart" not in self.config.partition_by:
            return (
                "a Parquet sink is recovered by moving its windowStart partitions aside: partition it by windowStart "
                "([sink] partition_by), or write Delta Lake, whose recovery reads the table's rows"
            )
        return None

    def held_windows(self) -> HeldWindows:
        """The window starts of the files Spark's file sink log commits (their `windowStart=` folders)."""
        from tidemark.errors import UsageError
        from tidemark.formats import Checkpoint, partition_start, read_sink_log
        from tidemark.storage import open_storage

        gap = self.recover_gap()
        if gap is not None:
            msg = f"tidemark recover refused: {gap}"
            raise UsageError(msg)
        sink = open_storage(self.path or "")
        log = read_sink_log(sink, empty=Checkpoint.open(self.config.checkpoint.location).repartition_batches)
        listed = {e.rel for e in sink.list_files()}
        committed = tuple(p for p in log.files if p in listed)
        starts = {s for s in (partition_start(f) for f in committed) if s is not None}
        return HeldWindows(
            uri=sink.uri(),
            files=committed,
            rows=-1,
            starts=tuple(sorted(starts)),
            read_from=f"the windowStart folders of the {len(committed)} file(s) Spark's file sink log commits",
        )

    def holds_output(self) -> bool:
        """True when the folder has Spark's file sink log (a query committed batches into it)."""
        from tidemark.formats import read_sink_log
        from tidemark.storage import open_storage

        return read_sink_log(open_storage(self.path or "")).exists

    def batch_hook(self) -> BatchHook | None:
        """Record, after each committed batch, the sink files it added (evidence Spark's retention cannot erase)."""
        from tidemark.formats import record_batch
        from tidemark.storage import open_storage

        checkpoint = open_storage(self.config.checkpoint.location)
        sink = open_storage(self.path or "")

        def hook(progress: dict[str, Any]) -> None:
            rows = (progress.get("sink") or {}).get("numOutputRows")
            record_batch(checkpoint, sink, int(progress["batchId"]), None if rows is None or rows < 0 else int(rows))

        return hook

    def files_checked(self) -> str | None:
        """The sink folder itself."""
        return self.path
