"""The sink contract: what the pipeline and the tools ask of wherever a pipeline writes its final rows.

One connector per `[sink] format`, a module of this package or, with a format of its own, a package (parquet/:
Spark's file sink log; delta/: the table's log) that answers every question about that format through this
contract; nothing outside the connector chooses behaviour by connector (tests/unit/test_sink_seam.py). A new sink
subclasses `Sink` (CONTRIBUTING.md: "Add a sink").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from tidemark.compat import StrEnum
from tidemark.config import AggregationKind, SinkFormat, TidemarkConfig
from tidemark.errors import EnvironmentProblem
from tidemark.spark.artifacts import JarFeature, missing_class
from tidemark.storage import Location, Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from tidemark.findings import Finding
    from tidemark.formats import Checkpoint
    from tidemark.sinks.audit import SinkAudit
    from tidemark.storage import Backend

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
class SinkWindows:
    """The windows an old job's sink holds (`tidemark adopt`): a folder's committed files (its log's, or all of a
    copy), a table's snapshot."""

    uri: str
    files: int  # committed data files read
    rows: int
    newest_start: datetime | None
    column: str | None  # where the window start was found: windowStart, window.start, or a partition folder
    uncommitted: tuple[str, ...]  # data files the sink's log does not list (a failed batch's)
    copied: bool = False  # the sink's log names another folder's files: every file here was read


@dataclass(frozen=True)
class TableRollback:
    """How a table sink undoes a checkpoint's batches after to_batch: one commit of its own log (Delta's RESTORE)."""

    uri: str
    to_batch: int
    undone: tuple[TableCommit, ...]  # this checkpoint's commits of later batches, still live in the table
    reset_to: int | None  # the transaction version the table goes back to; None: it is there already
    notes: tuple[str, ...] = ()
    restore_version: int | None = None  # the table version (or snapshot) its undo goes back to
    # How the table's own undo takes the commits out, in the plan's words: Delta's RESTORE is one new commit; a
    # table whose undo moves its current pointer back (Iceberg's rollback_to_snapshot) says so instead.
    undone_by: str = "undone by one commit"

    def describe(self) -> str:
        """One line for the plan: the undone commits, how the table undoes them, their files and rows."""
        rows = "?" if self.rows is None else f"{self.rows:,}"
        return (
            f"table {self.uri}: {len(self.undone)} commit(s) of batches after {self.to_batch} {self.undone_by} "
            f"({len(self.files)} file(s), {rows} rows, kept for time travel)"
        )

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


DYNAMIC_ALLOCATION_KEY = "spark.dynamicAllocation.enabled"


def file_writers(config: TidemarkConfig, task_slots: int) -> int | None:
    """How many tasks run the stage that writes a batch's files (Parquet, a table's data files); None leaves Spark's
    plan.

    Each writing task writes one file into every output partition its rows fall in, so with Spark's plan a batch
    that closes windows writes (state partitions x windows) small files, and the batch that emits a caught-up
    backlog spends most of its time opening and closing them. Window and session aggregations write through
    `coalesce` instead: `[sink] writers` tasks, by default one per task slot (a coalesce never adds partitions).
    Coalesce is narrow, so the whole stage after the shuffle (state restore, merge, state save, write) runs in that
    many tasks. Under dynamic allocation the slots are not known at start: Spark's plan stays unless `writers` is
    set. Per-key logic (kind "custom") keeps Spark's plan: its state operator runs Python workers per partition,
    which this has not been verified with.
    """
    if config.aggregation.kind is AggregationKind.CUSTOM:
        return None
    if config.sink.writers is not None:
        return config.sink.writers
    if str(config.spark_conf().get(DYNAMIC_ALLOCATION_KEY, "false")).lower() == "true":
        return None
    return max(1, task_slots)


def require_jar_class(session: SparkSession, class_name: str, jars: str) -> None:
    """One line when a local session's JVM lacks a sink's class (a running session started without its `jars`).

    A Connect server's classpath is not looked up: a missing jar there fails the first write.
    """
    from tidemark.connect import is_connect

    if is_connect(session):
        return
    lookup = missing_class(session, class_name, initialize=True)
    if lookup is not None:
        msg = (
            f"this Spark session has no {jars} (a session's classpath is fixed when it starts): start it "
            "with the jars `tidemark jars list CONFIG` lists on spark.jars, or let tidemark start it"
        )
        raise EnvironmentProblem(msg) from lookup


class AsideKind(StrEnum):
    """Why a recovery or a rollback moves one of the sink's files or folders into the archive (the values are
    recovery's move kinds)."""

    LOG = "sink-metadata"  # the sink's own log folder (a new query starts its own)
    LOG_FILE = "checkpoint-file"  # a log entry of a batch a rollback undoes
    FAILED_BATCH_FILE = "failed-batch-file"  # a data file no committed batch lists
    REWRITTEN_PARTITION_FILE = "rewritten-partition-file"  # a data file of a window the replay writes again
    ROLLED_BACK_FILE = "rolled-back-file"  # a data file of a batch a rollback undoes


@dataclass(frozen=True)
class SinkAside:
    """One file or folder of the sink (below it) that moves into the archive."""

    kind: AsideKind
    rel: str


@dataclass(frozen=True)
class SinkRecovery:
    """What a recovery does to the sink before its replay from `resume`: what moves aside, what stays."""

    aside: tuple[SinkAside, ...]
    surviving: tuple[str, ...]  # data files that stay, below the sink
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SinkRollback:
    """What a rollback to to_batch does to the sink: files moved aside (by the caller's journal), and the sink's
    own undo commit where its table keeps a log (applied by `Sink.apply_rollback` before the moves)."""

    to_batch: int
    aside: tuple[SinkAside, ...] = ()
    undo: TableRollback | None = None
    notes: tuple[str, ...] = ()

    def describe(self) -> str | None:
        """One line for the plan about the sink's own undo (in the undo's own words), None when it has none."""
        return None if self.undo is None else self.undo.describe()


@dataclass(frozen=True)
class SinkLimits:
    """`checkpoint inspect`'s thresholds for a sink's own log and files."""

    max_log_compact_bytes: int  # a file sink's compact log file
    max_log_files: int  # files one compact log file lists
    max_table_files: int  # a table's active files (with small_file_bytes: compact it)
    small_file_bytes: int


class SinkInspection(Protocol):
    """What `checkpoint inspect --sink` reports of a sink folder: the connector's own report (JSON: its fields)."""

    @property
    def path(self) -> str:
        """The folder inspected."""
        ...

    def findings(self, limits: SinkLimits) -> list[Finding]:
        """What the sink's own log or files call for (a log grown large, many small files)."""
        ...

    def describe(self) -> list[tuple[str, str]]:
        """Lines for the terminal: (a bold title or "", the rest)."""
        ...

    def missing_log_entries(self, repartitioned: Collection[int]) -> dict[int, str]:
        """Of the batches Spark's offline repartition committed (no output), those the sink's log has no entry for
        while later batches have one (every Spark reader then fails), each with the entry to write; {} for a sink
        whose log owes such a batch nothing."""
        ...


@dataclass(frozen=True)
class LogTrim:
    """The entries of a sink's own log that no batch from a given one on reads (`checkpoint prune --sink`)."""

    label: str  # the log, in the user's words, for prune's folder counts
    paths: tuple[str, ...]  # below the sink folder, checksums included
    bytes: int


@dataclass(frozen=True)
class SinkMatch:
    """What a sink holds on disk against what the config writes: checked before anything changes a sink."""

    uri: str
    problem: str | None  # how it differs in words (another job's output), None when it matches


@dataclass(frozen=True)
class SinkCheck:
    """Rows and repeated (key, window) rows as the sink's readers read it after a replay; a second reader's (Spark's)
    where the sink has one."""

    rows: int
    duplicates: int
    reader: str  # who read them: "pyarrow", "delta-rs"
    spark_rows: int | None = None
    spark_duplicates: int | None = None

    @property
    def ok(self) -> bool:
        """True when no reader sees a (key, window) twice and both see the same rows."""
        spark_ok = self.spark_rows is None or (self.spark_duplicates == 0 and self.spark_rows == self.rows)
        return self.duplicates == 0 and spark_ok


class Sink(ABC):
    """A pipeline's sink, built from its config (sinks.sink_of)."""

    format: ClassVar[SinkFormat]
    jar_groups: ClassVar[frozenset[JarFeature]] = frozenset()  # jars Spark needs to write it
    # The exactly-once tools that vouch for this sink (none until a connector lists them and answers their
    # questions below); the others refuse with exactly_once_gap.
    vouched_by: ClassVar[frozenset[Tool]] = frozenset()
    exactly_once_gap: ClassVar[str | None] = None
    # True when `tidemark adopt` may write into the old job's own sink (its commits tell writers apart); a sink whose
    # log belongs to one query (Spark's file sink) gets a new folder.
    adopts_in_place: ClassVar[bool] = False
    # What a new query would do to this sink's committed output if its checkpoint were lost.
    lost_checkpoint_risk: ClassVar[str] = "write its output again"
    # Who reads the rows `table_rows` returns, for audit's messages.
    readers: ClassVar[str] = "its readers"
    # True when the sink keeps its own log across a recovery (what survived stays listed in it); False when the new
    # query starts a new log and the surviving files join it after the replay (`finish_recovery`).
    keeps_own_log: ClassVar[bool] = True
    # How a write of this sink fails when another run of the same query wrote the same batch at the same time (a
    # killed Spark Connect client's query still running on the server): the batch may simply run again.
    concurrent_write_errors: ClassVar[tuple[str, ...]] = ()

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

    def spark_locations(self) -> tuple[str, ...]:
        """Where the pipeline's Spark writes this sink's output, as the config names it (the session gets the
        credentials and cloud connectors for each): `[sink] path` by default."""
        return (self.config.sink.path,) if self.config.sink.path else ()

    def setup_warnings(self) -> tuple[Finding, ...]:
        """What a run warns about this sink's setup once, before its first batch: a setup that works but is unsafe
        in some use (none by default)."""
        return ()

    def archive_location(self, checkpoint: Location) -> Location:
        """Where `recover` and `recover --to-batch` keep what they move aside and their journals: beside the sink's
        folder (a folder of files, a path table), whose moves then stay on its storage."""
        from tidemark.formats import ARCHIVE_DIR
        from tidemark.storage import parse_location

        del checkpoint
        return parse_location(self.path or "").parent.join(ARCHIVE_DIR)

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

    @classmethod
    def inspect_folder(
        cls, path: str, checkpoint: Storage, backend: Backend = "auto", spark: Any | None = None
    ) -> SinkInspection:
        """`checkpoint inspect --sink`: what the folder in this connector's format holds (checkpoint: the query's,
        for what of it the folder holds)."""
        del checkpoint, backend, spark
        from tidemark.errors import UsageError

        msg = f"checkpoint inspect --sink cannot read {path} as {cls.format.value} output"
        raise UsageError(msg)

    @classmethod
    def log_through(cls, folder: Storage, batch: int) -> LogTrim:
        """The entries of this connector's log in folder that no batch from `batch` on reads (`checkpoint prune
        --sink`); a connector whose log keeps its own retention refuses in one line."""
        del batch
        from tidemark.errors import UsageError

        msg = (
            f"{folder.uri()} is a {cls.format.value} table: its log keeps its own retention, which `checkpoint prune "
            "--sink` does not trim"
        )
        raise UsageError(msg)

    @classmethod
    def old_windows(cls, folder: Storage) -> SinkWindows:
        """The windows another job's output in this connector's format holds (`tidemark adopt --old-sink`, for a
        connector that does not adopt in place)."""
        from tidemark.errors import UsageError

        msg = f"{Tool.ADOPT.value} refused: {folder.uri()} cannot be read as an old job's {cls.format.value} output"
        raise UsageError(msg)

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

    def match_layout(self, expected_columns: tuple[str, ...] | None) -> SinkMatch | None:
        """How what the sink holds differs from what the config writes (its partitioning, its query's columns:
        expected_columns, None when code decides them); None when there is nothing to compare (a table checks its
        own schema at every append)."""
        del expected_columns
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

    def check_per_key(self) -> None:
        """`recover --per-key` rewrites windows some keys already have: refused in one line (before anything is
        read) by a sink whose files cannot move aside."""
        from tidemark.errors import UsageError

        msg = (
            "--per-key rewrites windows some keys already have, which this sink cannot take back (its files do not "
            "move aside): recover without --per-key"
        )
        raise UsageError(msg)

    def newest_per_key(self, held: HeldWindows, keys: list[str]) -> datetime | None:
        """`recover --per-key` (after check_per_key): the oldest of the keys' newest windows, from which every key's
        later windows are rewritten; None when no key has one."""
        del held, keys
        self.check_per_key()
        return None

    def recovery_cut(self, checkpoint: Checkpoint, held: HeldWindows, resume: datetime) -> SinkRecovery:
        """What a recovery replaying from `resume` moves aside of the sink. By default nothing: right for a sink that
        keeps its own log (a table), which a lost checkpoint does not touch and which holds no window from the
        resume point on; a sink whose new query starts a new log (Spark's file sink) moves that log aside."""
        del checkpoint, resume
        return SinkRecovery(aside=(), surviving=held.files)

    def surviving_entries(self, checkpoint: Checkpoint, files: tuple[str, ...]) -> tuple[str, ...]:
        """What the recovery marker keeps of the surviving files, for `finish_recovery` (a file sink's log lines)."""
        del checkpoint, files
        return ()

    def finish_recovery(self, checkpoint: Location) -> int | None:
        """After the replay's first committed batch: give the sink's new log the surviving files; how many, None
        when there is nothing to do (yet)."""
        del checkpoint
        return None

    def failed_batch_files(self, checkpoint: Checkpoint) -> tuple[tuple[str, ...], int]:
        """A killed batch's files (below the sink) to move aside before a re-run, and how many files no commit lists
        stay (older than the newest commit: an expired log entry's). Nothing for a sink whose commits are atomic."""
        del checkpoint
        return (), 0

    def check_rows(self, keys: tuple[str, ...], spark: SparkSession | None) -> SinkCheck | None:
        """The rows and repeated keys after a replay, None when the sink holds nothing yet."""
        del keys, spark
        return None

    def audit(self, checkpoint: Checkpoint, inputs: Mapping[int, tuple[str, ...]]) -> SinkAudit:
        """The sink's own record of the checkpoint's committed batches (what each read: inputs) and what breaks
        exactly-once in it."""
        del checkpoint, inputs
        self.refuse(Tool.AUDIT)
        msg = f"{type(self).__name__} has no audit"
        raise NotImplementedError(msg)

    def plan_rollback(self, checkpoint: Checkpoint, to_batch: int) -> SinkRollback:
        """What undoing the batches after to_batch does to the sink (its files moved aside, or its own undo
        commit)."""
        del checkpoint
        self.refuse(Tool.ROLLBACK)
        return SinkRollback(to_batch)

    def apply_rollback(self, checkpoint: Storage, plan: SinkRollback) -> None:  # noqa: B027 (files-only sinks)
        """The sink's own undo (plan.undo), before the caller moves the plan's files aside. The caller marks the
        checkpoint first and clears the mark after its moves (recovery/rollback.py): a run refuses while it is
        there, so a kill between the undo and the moves cannot let the old batches run on against the undone
        output; run again, the rollback finds the undo done (plan it as a no-op) and finishes the moves."""

    def table_rows(self, columns: list[str]) -> Any:
        """The sink's rows as its readers read them, projected on columns, as a pyarrow Table (a table's deletion
        vectors applied, partition values from its log; a folder of files as a plain Parquet reader sees it)."""
        del columns
        self.refuse(Tool.AUDIT)
        msg = f"{type(self).__name__} cannot read its rows"
        raise NotImplementedError(msg)
