"""The Parquet file sink: Spark's file sink with its `_spark_metadata` log, partitioned by window start."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import SinkFormat
from tidemark.sinks.base import (
    AsideKind,
    BatchHook,
    HeldWindows,
    LogTrim,
    Sink,
    SinkAside,
    SinkCheck,
    SinkInspection,
    SinkMatch,
    SinkRecovery,
    SinkRollback,
    SinkWindows,
    Tool,
    file_writers,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from tidemark.formats import Checkpoint
    from tidemark.sinks.audit import SinkAudit
    from tidemark.storage import Backend, Location, Storage


class ParquetSink(Sink):
    """Parquet files, committed per batch in the sink's metadata log; every exactly-once tool vouches for it."""

    format: ClassVar[SinkFormat] = SinkFormat.PARQUET
    lost_checkpoint_risk: ClassVar[str] = "skip its first batches as already committed (Spark's file sink log)"
    vouched_by: ClassVar[frozenset[Tool]] = frozenset(Tool)
    readers: ClassVar[str] = "a plain Parquet reader"
    keeps_own_log: ClassVar[bool] = False  # a new query starts a new `_spark_metadata`

    def writers(self, task_slots: int) -> int | None:
        """How many tasks run the stage that writes a batch's Parquet output (sinks/base.py `file_writers`)."""
        return file_writers(self.config, task_slots)

    def _folder(self) -> Storage:
        """The sink's output folder, on its store."""
        from tidemark.storage import open_storage

        return open_storage(self.path or "")

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
        from tidemark.formats import Checkpoint
        from tidemark.sinks.parquet.log import partition_start
        from tidemark.sinks.parquet.log import read_log as read_sink_log

        gap = self.recover_gap()
        if gap is not None:
            msg = f"tidemark recover refused: {gap}"
            raise UsageError(msg)
        sink = self._folder()
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

    @classmethod
    def inspect_folder(
        cls, path: str, checkpoint: Storage, backend: Backend = "auto", spark: Any | None = None
    ) -> SinkInspection:
        """How big the folder's `_spark_metadata` log has grown (sinks/parquet/inspect.py)."""
        del checkpoint
        from tidemark.sinks.parquet.inspect import inspect_log

        return inspect_log(path, backend, spark)

    @classmethod
    def log_through(cls, folder: Storage, batch: int) -> LogTrim:
        """The `_spark_metadata` entries before the newest compaction at or below `batch` (which holds them all)."""
        from tidemark.errors import UsageError
        from tidemark.formats import compacted_log_through
        from tidemark.sinks.parquet.log import SINK_LOG_DIR, companions
        from tidemark.storage import join

        picked = compacted_log_through(folder, SINK_LOG_DIR, batch)
        if picked is None:
            msg = (
                f"{folder.uri()} has no {SINK_LOG_DIR} log (a Spark file sink's): --sink names the folder the query "
                "writes to"
            )
            raise UsageError(msg)
        listing, names = picked
        sizes = {join(SINK_LOG_DIR, n): size for n, size in listing.files}
        rels = tuple(rel for n in names for rel in companions(join(SINK_LOG_DIR, n), set(sizes)))
        return LogTrim(f"sink {SINK_LOG_DIR}", rels, sum(sizes[rel] for rel in rels))

    @classmethod
    def old_windows(cls, folder: Storage) -> SinkWindows:
        """The window starts of the folder's committed files (its log's, or every file of a copied folder)."""
        from tidemark.sinks.parquet.layout import sink_windows

        return sink_windows(folder)

    def holds_output(self) -> bool:
        """True when the folder has Spark's file sink log (a query committed batches into it)."""
        from tidemark.sinks.parquet.log import read_log as read_sink_log

        return read_sink_log(self._folder()).exists

    def batch_hook(self) -> BatchHook | None:
        """Record, after each committed batch, the sink files it added (evidence Spark's retention cannot erase)."""
        from tidemark.sinks.parquet.ledger import record_batch
        from tidemark.storage import open_storage

        checkpoint = open_storage(self.config.checkpoint.location)
        sink = self._folder()

        def hook(progress: dict[str, Any]) -> None:
            rows = (progress.get("sink") or {}).get("numOutputRows")
            record_batch(checkpoint, sink, int(progress["batchId"]), None if rows is None or rows < 0 else int(rows))

        return hook

    def match_layout(self, expected_columns: tuple[str, ...] | None) -> SinkMatch | None:
        """The folder's partition folders and file columns against the config's (sinks/parquet/layout.py)."""
        from tidemark.formats import Checkpoint
        from tidemark.sinks.parquet.layout import layout_problem, read_sink_layout

        sink = self._folder()
        if not sink.exists(""):
            return None
        # Spark's offline repartition batch, proven by the checkpoint, is the one batch the sink log may skip.
        layout = read_sink_layout(sink, empty=Checkpoint.open(self.config.checkpoint.location).repartition_batches)
        return SinkMatch(layout.uri, layout_problem(layout, tuple(self.config.partition_by), expected_columns))

    def check_per_key(self) -> None:
        """A file sink's files move aside per key's windows: `--per-key` is fine."""

    def newest_per_key(self, held: HeldWindows, keys: list[str]) -> datetime | None:
        """The oldest of the keys' newest windows (each committed file's keys, by its windowStart folder)."""
        from tidemark.sinks.parquet.recovery import newest_per_key

        return newest_per_key(list(held.files), self._folder(), keys)

    def recovery_cut(self, checkpoint: Checkpoint, held: HeldWindows, resume: datetime) -> SinkRecovery:
        """The log folder (the new query starts its own), files no committed batch lists, and the committed files
        of windows from `resume` on (sinks/parquet/recovery.py)."""
        from tidemark.sinks.parquet.recovery import recovery_cut

        return recovery_cut(checkpoint, self._folder(), held, resume)

    def surviving_entries(self, checkpoint: Checkpoint, files: tuple[str, ...]) -> tuple[str, ...]:
        """The surviving files' lines of the old log, which the new log gets after the replay's first batch."""
        from tidemark.sinks.parquet.log import query_log

        log = query_log(checkpoint, self._folder())
        return tuple(log.files[p] for p in files if p in log.files)

    def finish_recovery(self, checkpoint: Location) -> int | None:
        """Add the surviving files to the new log once the replay committed a batch (the recovery marker's lines)."""
        from tidemark.sinks.parquet.recovery import finish_pending
        from tidemark.storage import parse_location

        return finish_pending(checkpoint, parse_location(self.path or ""))

    def failed_batch_files(self, checkpoint: Checkpoint) -> tuple[tuple[str, ...], int]:
        """Files no committed batch lists (log, ledger, recovery marker) written after the newest commit."""
        from tidemark.sinks.parquet.recovery import failed_batch_files

        return failed_batch_files(checkpoint, self._folder())

    def check_rows(self, keys: tuple[str, ...], spark: SparkSession | None) -> SinkCheck | None:
        """Rows and repeated keys with pyarrow (every data file) and, given a session, with Spark (through the log)."""
        from tidemark.sinks.parquet.log import read_log
        from tidemark.sinks.parquet.recovery import check_rows

        if not read_log(self._folder()).exists:
            return None
        return check_rows(self.path or "", keys, spark)

    def audit(self, checkpoint: Checkpoint, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
        """Each batch's files from the log and the ledger, and what breaks exactly-once (sinks/parquet/audit.py)."""
        from tidemark.sinks.parquet.audit import audit_files

        return audit_files(checkpoint, self._folder(), inputs)

    def plan_rollback(self, checkpoint: Checkpoint, to_batch: int) -> SinkRollback:
        """The log files after to_batch and the data files of the batches after it move aside."""
        from tidemark.sinks.parquet.rollback import sink_files_after

        picked = sink_files_after(checkpoint, self._folder(), to_batch)
        if picked is None:
            return SinkRollback(to_batch)
        log_files, data = picked
        aside = [SinkAside(AsideKind.LOG_FILE, rel) for rel in log_files]
        aside += [SinkAside(AsideKind.ROLLED_BACK_FILE, rel) for rel in data]
        return SinkRollback(to_batch, aside=tuple(aside))

    def table_rows(self, columns: list[str]) -> Any:
        """The rows a plain Parquet reader reads (every data file, partition values from Hive folders)."""
        from tidemark.sinks.parquet.recovery import plain_rows

        return plain_rows(self._folder(), columns)
