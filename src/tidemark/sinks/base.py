"""The sink contract: what the pipeline and the tools ask of wherever a pipeline writes its final rows.

One implementation per `[sink] format`, each in its own module (or, with a format of its own, package: delta/) of
this package; nothing outside this package (and config/) branches on the sink's format. A new sink subclasses
`Sink` (CONTRIBUTING.md: "Add a sink").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.compat import StrEnum
from tidemark.config import SinkFormat, TidemarkConfig
from tidemark.spark.artifacts import JarFeature
from tidemark.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

# Called with each committed batch's progress (Spark's StreamingQueryProgress as JSON).
BatchHook = Callable[[dict[str, Any]], None]


class Tool(StrEnum):
    """tidemark's exactly-once tools, each of which a sink vouches for or refuses in one line."""

    RECOVER = "tidemark recover"
    ROLLBACK = "tidemark recover --to-batch"
    ADOPT = "tidemark adopt"
    AUDIT = "tidemark audit"
    FAILOVER = 'an automatic recovery (on_missing = "recover")'


@dataclass(frozen=True)
class TableCommit:
    """One commit a pipeline's batch made to a table sink, as the table's own log tells it."""

    batch: int
    version: int  # the table's version of the commit
    files: tuple[str, ...]  # data files it added, below the table
    rows: int | None  # rows in them (their stats), None when unknown


@dataclass(frozen=True)
class TableOutput:
    """What a table sink (one with its own transaction log) holds of a checkpoint's batches."""

    uri: str
    commits: tuple[TableCommit, ...]  # this checkpoint's, oldest first
    live_files: tuple[str, ...]  # the data files the table's readers read now
    other_commits: int  # commits by other writers (another app id, a compaction, a hand-made change)
    other_writers: tuple[str, ...]  # their app ids or operations
    first_batch_held: int | None  # the oldest batch whose commit the log still holds (older: log retention)
    notes: tuple[str, ...] = ()
    log_trimmed: bool = False  # the table's log retention removed its oldest commits

    def checks_batch(self, batch: int) -> bool:
        """True when the log still reaches back to the batch's commit (its absence then means something)."""
        if not self.log_trimmed:
            return True
        return self.first_batch_held is not None and batch >= self.first_batch_held


@dataclass(frozen=True)
class HeldWindows:
    """The windows a sink holds, read from the data it holds (a table's snapshot or rows, a file sink's committed
    files), never guessed from file names: what `recover` resumes after."""

    uri: str
    files: tuple[str, ...]  # the data files its readers read now, below uri
    rows: int  # rows its readers read (-1: unknown)
    starts: tuple[datetime, ...]  # distinct window starts held, oldest first
    read_from: str  # how they were read, for the plan's reader
    table_id: str | None = None  # a table's own id (Delta's metaData.id), None for a folder of files

    @property
    def newest_start(self) -> datetime | None:
        """The newest window start held, None when it holds none."""
        return self.starts[-1] if self.starts else None


@dataclass(frozen=True)
class TableRollback:
    """How a table sink undoes a checkpoint's batches after to_batch: one commit of its own log (Delta's RESTORE)."""

    uri: str
    to_batch: int
    undone: tuple[TableCommit, ...]  # this checkpoint's commits of later batches, still live in the table
    reset_to: int | None  # the transaction version the table goes back to; None: it is there already
    notes: tuple[str, ...] = ()
    restore_version: int | None = None  # the table version its RESTORE goes back to

    @property
    def files(self) -> tuple[str, ...]:
        """The data files of the undone batches (the undo commit removes them; they stay on storage for time
        travel)."""
        return tuple(f for c in self.undone for f in c.files)

    @property
    def rows(self) -> int | None:
        """Rows those files hold, None when a commit's stats lack a count."""
        counts = [c.rows for c in self.undone]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


class Sink(ABC):
    """A pipeline's sink, built from its config (sinks.sink_of)."""

    format: ClassVar[SinkFormat]
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset()  # jars Spark needs to write it
    # The exactly-once tools that vouch for this sink; the others refuse with exactly_once_gap.
    vouched_by: ClassVar[frozenset[Tool]] = frozenset(Tool)
    exactly_once_gap: ClassVar[str | None] = None
    # True when `tidemark adopt` may write into the old job's own sink (its commits tell writers apart); a sink whose
    # log belongs to one query (Spark's file sink) gets a new folder.
    adopts_in_place: ClassVar[bool] = False
    # What a new query would do to this sink's committed output if its checkpoint were lost.
    lost_checkpoint_risk: ClassVar[str] = "write its output again"

    def __init__(self, config: TidemarkConfig) -> None:
        self.config = config

    @classmethod
    def claims(cls, folder: Storage) -> bool:
        """True when the folder holds this connector's own format (a table's log), which no other connector may
        read as plain files."""
        del folder
        return False

    @property
    def path(self) -> str | None:
        """Where the output lives (a folder or a table's folder); None for a sink that keeps nothing."""
        return self.config.sink.path

    def unresolved(self) -> str | None:
        """Why the output's location is not known without a Spark session (a catalog table no run has resolved
        yet), in one line; None when it is known."""
        return None

    def located(self, spark: SparkSession) -> TidemarkConfig:
        """The config with the output's location as the session knows it, for a sink `unresolved` (its
        checkpoint, which recorded it, was lost): the tools then read it there. Unchanged when the session does
        not know it either."""
        del spark
        return self.config

    def check(self) -> None:  # noqa: B027 (most sinks have nothing to check)
        """Before the JVM starts (`tidemark run`, a replay): raise a one-line error for a state of the sink no
        query may start on (a rollback of its output that was interrupted)."""

    def spark_settings(self) -> Mapping[str, str]:
        """Settings the session needs for this sink (under the config's own explicit ones)."""
        return {}

    def writers(self, task_slots: int) -> int | None:
        """How many tasks run the writing stage; None leaves Spark's plan."""
        del task_slots
        return None

    @abstractmethod
    def configure(self, writer: DataStreamWriter, output: DataFrame) -> DataStreamWriter:
        """The streaming writer, pointed at this sink (the checkpoint, trigger and query name are set already)."""

    def recover_gap(self) -> str | None:
        """Why `tidemark recover` cannot resume this sink's windows (one line), None when it can."""
        return self.exactly_once_gap if not self.vouches(Tool.RECOVER) else None

    def held_windows(self) -> HeldWindows:
        """The windows the sink holds, read from what it holds (never from file names): `recover` resumes after
        the newest. A sink that cannot say refuses in one line."""
        from tidemark.errors import UsageError

        msg = f"{Tool.RECOVER.value} refused: {self.recover_gap() or 'this sink cannot say which windows it holds'}"
        raise UsageError(msg)

    def holds_output(self) -> bool:
        """True when the sink already holds batches this pipeline committed (a new checkpoint would repeat them)."""
        return False

    def batch_hook(self) -> BatchHook | None:
        """What to record after each committed batch (tidemark's ledger), None for nothing."""
        return None

    def files_checked(self) -> str | None:
        """The folder of plain Parquet files whose layout must match the config before anything changes it."""
        return None

    def vouches(self, tool: Tool) -> bool:
        """True when the tool can vouch for this sink."""
        return tool in self.vouched_by

    def refuse(self, tool: Tool) -> None:
        """Raise a one-line UsageError when the tool cannot vouch for this sink."""
        from tidemark.errors import UsageError

        if not self.vouches(tool):
            msg = f"{tool.value} refused: {self.exactly_once_gap or 'not for this sink'}"
            raise UsageError(msg)

    def plan_table_rollback(self, checkpoint: Storage, to_batch: int) -> TableRollback | None:
        """A table sink's undoing of the batches after to_batch (through its own log); None for a sink whose files
        the rollback moves aside (Parquet, by Spark's file sink log and tidemark's ledger)."""
        del checkpoint, to_batch
        return None

    def apply_table_rollback(self, checkpoint: Storage, plan: TableRollback) -> None:
        """Carry out plan_table_rollback's plan (the checkpoint keeps a mark of it until the rollback ends)."""
        del checkpoint, plan
        msg = f"{type(self).__name__} has no table to roll back"
        raise NotImplementedError(msg)

    def table_rows(self, columns: list[str]) -> Any:
        """A table sink's rows as its readers read them (deletion vectors applied, partition values from its log),
        projected on columns, as a pyarrow Table; None for a sink audited through its files (Parquet)."""
        del columns
        return None

    def table_output(self, checkpoint: Storage) -> TableOutput | None:
        """A table sink's own record of the checkpoint's batches; None for a sink audited through Spark's file
        sink log and tidemark's ledger (Parquet)."""
        del checkpoint
        return None
