"""A landing folder of JSON, CSV or Parquet files, read by Spark's file source: the stream, its replay, its catch-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.errors import SourceError
from tidemark.sources.base import (
    CORRUPT_COLUMN,
    SOURCE_FILE_COLUMN,
    BatchInput,
    RawStream,
    ReplayStart,
    Source,
    SourcePosition,
    newest_event,
    parse_schema,
)
from tidemark.sources.capabilities import CatchesUp, Replayable
from tidemark.storage import open_storage, parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from tidemark.formats import Checkpoint
    from tidemark.sources.catchup import CatchUpContext
    from tidemark.sources.files.catchup import FileCatchUpPlan

# How much memory a batch's rows take per byte of input, at most (catch-up's memory ceiling, so it errs high):
# text formats shrink when parsed, Parquet is compressed and grows.
_EXPANSION = {SourceFormat.JSON: 1.0, SourceFormat.CSV: 1.0, SourceFormat.PARQUET: 3.0}
_KEEPS_RAW = frozenset({SourceFormat.JSON, SourceFormat.CSV})  # a malformed row's line is kept


@dataclass(frozen=True)
class FilePosition(SourcePosition):
    """A file source's committed position: the files the old job's source log lists through its last batch."""

    processed: int
    missing: tuple[str, ...]  # processed files no longer in the landing folder
    outside: tuple[str, ...]  # processed files not under the config's landing folder
    new_files: int  # landing files the old job never read
    landing: str  # the config's landing folder
    kind: str = "file"
    replay_offsets: str | None = None  # a landing folder is replayed whole

    def describe(self) -> str:
        """One line for the plan."""
        return f"{self.processed:,} landing file(s) read by the old job, {self.new_files:,} arrived since"

    def refusal(self, resume_from: datetime) -> str | None:
        """Files read outside the landing folder, or gone from it: the replay would miss their events."""
        if self.outside:
            return (
                f"the old job read {len(self.outside)} file(s) outside [source] path {self.landing} "
                f"(e.g. {self.outside[0]}): point [source] path at the folder it reads"
            )
        if self.missing:
            return (
                f"{len(self.missing)} landing file(s) the old job read are gone (e.g. {self.missing[0]}): "
                f"the windows open at the cut-over (from {resume_from.isoformat()}) would miss their events"
            )
        return None


def _same_file(uri: str) -> str:
    return parse_location(uri).uri.replace("file://", "").replace("file:", "")


class FileSource(Replayable, CatchesUp, Source):
    """JSON, CSV or Parquet files landing in a folder."""

    formats: ClassVar[frozenset[SourceFormat]] = frozenset(_EXPANSION)

    @property
    def path(self) -> str:
        """The landing folder."""
        return self.config.source.path or ""

    def check(self) -> None:
        path = self.path
        if path and "://" not in path and not Path(path).exists():
            msg = f"source.path {path} does not exist: create the landing folder or fix [source] path"
            raise SourceError(msg)

    def _reader(self, spark: SparkSession, stream: bool, keep_raw: bool, schema: StructType | None = None) -> Any:
        source = self.config.source
        schema = schema if schema is not None else parse_schema(source.schema_ddl or "")
        reader: Any = (spark.readStream if stream else spark.read).format(source.format.value)
        if keep_raw:
            from pyspark.sql.types import StringType, StructField, StructType

            schema = StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType(), True)])
            reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        if source.format is SourceFormat.CSV:
            reader = reader.option("header", "true")
        if source.max_files_per_trigger and stream:
            reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
        for key, value in source.options.items():
            reader = reader.option(key, str(value))
        return reader.schema(schema)

    def _frame(self, spark: SparkSession, files: list[str] | None) -> RawStream:
        """The landing folder as a stream, or (files given) those files as one batch, parsed the same way."""
        from pyspark.sql import functions as F

        schema = parse_schema(self.config.source.schema_ddl or "")  # once: each parse is a round trip to the JVM
        columns = tuple(schema.fieldNames())
        keeps_raw = self.format in _KEEPS_RAW
        reader = self._reader(spark, files is None, keeps_raw, schema)
        frame = reader.load(files) if files is not None else reader.load(self.path)
        frame = frame.withColumn(SOURCE_FILE_COLUMN, F.col("_metadata.file_path"))
        return RawStream(frame, columns, F.col(CORRUPT_COLUMN) if keeps_raw else None, F.col(SOURCE_FILE_COLUMN))

    def stream(self, spark: SparkSession) -> RawStream:
        return self._frame(spark, None)

    def committed_inputs(self, checkpoint: Checkpoint, batches: list[int]) -> dict[int, BatchInput]:
        if not batches:
            return {}
        files = checkpoint.source_files_of(batches)
        return {b: BatchInput(b, tuple(files.get(b, []))) for b in batches if b in files}

    def read_input(self, spark: SparkSession, batch: BatchInput) -> RawStream | None:
        return self._frame(spark, list(batch.names)) if batch.names else None

    def expansion(self) -> float:
        """In-memory bytes per input byte of its files (catch-up sizing by bytes)."""
        return _EXPANSION[self.format]

    def catch_up_gap(self, spark: SparkSession | None) -> str | None:
        from tidemark.sources.files.backlog import supports_backlog

        del spark
        return supports_backlog(self.config)

    def plan_catch_up(
        self, spark: SparkSession | None, context: CatchUpContext
    ) -> tuple[FileCatchUpPlan, frozenset[object]]:
        """Measure the landing folder's backlog against the source log; the plan and the pending files' identities."""
        from tidemark.sources.catchup import fit_throughput
        from tidemark.sources.files.backlog import batch_samples, files_of_batches, read_backlog
        from tidemark.sources.files.catchup import default_throughput, file_split, plan_catch_up

        del spark
        config = self.config
        backlog = read_backlog(config)
        files = files_of_batches(config.checkpoint.location, [p.batch_id for p in context.history])
        samples = batch_samples(context.history, files, backlog.sizes_by_key)
        throughput = fit_throughput(samples) or default_throughput(context.task_slots)
        ceiling = context.memory_ceiling(self.expansion())
        sizes = [f.size for f in backlog.pending]
        split = file_split(config, [f.key[2] for f in backlog.pending])
        steady = config.source.max_files_per_trigger
        plan = plan_catch_up(sizes, steady, context.target, throughput, ceiling, context.task_slots, split)
        return plan, frozenset(f.key for f in backlog.pending)

    def replay_start(self, spark: SparkSession, resume_from: Callable[[], datetime]) -> ReplayStart:
        del spark, resume_from
        return ReplayStart(None, f"every landing file in {self.path}")

    def newest_event(self, spark: SparkSession, start: ReplayStart) -> datetime | None:
        """The newest valid event time in the landing files (a batch scan)."""
        del start
        self.check()
        return newest_event(self.config, self._reader(spark, stream=False, keep_raw=False).load(self.path))

    def replay_config(self, start: str | None) -> TidemarkConfig:
        """The config itself: a landing folder is replayed whole."""
        del start
        return self.config

    def describe_replay(self, resume_from: datetime, start: ReplayStart | None) -> str:
        del start
        return f"every landing file in {self.path}, {self._keeping(resume_from)}"

    def landing_files(self) -> set[str]:
        """Every visible file of the landing folder (Spark skips names starting with `.` or `_`)."""
        store = open_storage(self.path)
        return {store.uri(e.rel) for e in store.list_files() if not e.rel.rsplit("/", 1)[-1].startswith((".", "_"))}

    def adoption_position(
        self, spark: SparkSession | None, old: Checkpoint, batch: int, resume_from: datetime
    ) -> FilePosition:
        del spark, resume_from
        read = [f for files in old.source_files_of(list(range(batch + 1))).values() for f in files]
        landing = {_same_file(u) for u in self.landing_files()}
        root = _same_file(open_storage(self.path).uri()).rstrip("/") + "/"
        processed = {_same_file(f) for f in read}
        outside = tuple(sorted(f for f in processed if not f.startswith(root)))
        missing = tuple(sorted(f for f in processed if f.startswith(root) and f not in landing))
        return FilePosition(len(processed), missing, outside, len(landing - processed), self.path)
