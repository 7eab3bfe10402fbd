"""Open a checkpoint's state with Spark's `statestore` reader: session, options, flattening, clear errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import Checkpoint, FetchReport, fetch_state, log_features, private_copy
from tidemark.formats.entries import SHUFFLE_PARTITIONS
from tidemark.spark.lines import Feature, first_line_with, lacking, require

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tidemark.statestore.metadata import StoreInfo

log = logging.getLogger(__name__)

FORMAT_VERSION_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
TIMERS = "$timers"
PYSPARK_ERROR_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


@dataclass(frozen=True)
class ReadTarget:
    """One readable slice of state: a store, a transformWithState variable, or its timers."""

    operator_id: int
    store: str
    state_variable: str | None = None
    timers: bool = False

    @property
    def label(self) -> str:
        """The name shown to users: the store, or the state variable of a transformWithState operator."""
        if self.timers:
            return TIMERS
        return self.state_variable or self.store


def reader_options(target: ReadTarget, batch: int | None = None) -> dict[str, str]:
    """The statestore options that read one target at one batch (latest committed when None)."""
    options = {"operatorId": str(target.operator_id)}
    if target.timers:
        options["readRegisteredTimers"] = "true"
    elif target.state_variable is not None:
        options["stateVarName"] = target.state_variable
    else:
        options["storeName"] = target.store
    if batch is not None:
        options["batchId"] = str(batch)
    return options


def targets_of(store: StoreInfo, include_timers: bool = True) -> list[ReadTarget]:
    """The read targets of one store: one per transformWithState variable (plus timers), else the store."""
    if store.is_transform_with_state and store.from_metadata:
        targets = [ReadTarget(store.operator_id, store.store, v.name) for v in store.variables]
        if include_timers and store.has_timers:
            targets.append(ReadTarget(store.operator_id, store.store, timers=True))
        return targets
    return [ReadTarget(store.operator_id, store.store)]


@dataclass(frozen=True)
class StateSource:
    """A checkpoint as the state tools read it: its URI, the local folder Spark loads, and what was fetched."""

    uri: str
    root: Path  # the checkpoint itself when local, else the local cache the needed files were copied into
    checkpoint: Checkpoint  # over root
    fetched: FetchReport | None  # None for local checkpoints

    def __str__(self) -> str:
        return self.uri


def session_conf(checkpoint: Checkpoint) -> dict[str, str]:
    """Runtime SQL settings the reading session needs for this checkpoint."""
    batches = checkpoint.commit_batches()
    if batches and checkpoint.commit(batches[-1]).checkpoint_format == 2:
        return {FORMAT_VERSION_KEY: "2"}
    return {}


def open_state_source(path: str | Path, batches: tuple[int | None, ...] = (None,)) -> StateSource:
    """Check the checkpoint and, when it is remote, copy what loading state at these batches needs."""
    checkpoint = Checkpoint.open(str(path))
    checkpoint.require()
    latest = checkpoint.latest_committed_batch()
    if checkpoint.store.location.is_local:
        return StateSource(checkpoint.uri, Path(checkpoint.store.location.key), checkpoint, None)
    root, report = fetch_state(checkpoint, {(latest if b is None else b) + 1 for b in batches})
    return StateSource(checkpoint.uri, root, Checkpoint.open(str(root)), report)


@contextmanager
def quiet_jvm(spark: SparkSession) -> Iterator[None]:
    """Spark's own log lines (a failed task's stack, dozens of lines) off while tidemark reads state: a reader
    failure reaches the user as one line. `tidemark --debug` (debug logging) keeps them."""
    if logging.getLogger("tidemark").isEnabledFor(logging.DEBUG):
        yield
        return
    context = spark.sparkContext
    level = _log_level(context)
    context.setLogLevel("OFF")
    # PySpark logs every analysis error with its Java stack as one JSON line of its own (handlers of their own).
    loggers = [logging.getLogger(name) for name in PYSPARK_ERROR_LOGGERS]
    was = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        context.setLogLevel(level)
        for logger, disabled in zip(loggers, was, strict=True):
            logger.disabled = disabled


def _log_level(context: Any) -> str:
    """The JVM's root log level now (a notebook's own, given back after a read), ERROR when it cannot be read."""
    try:
        jvm: Any = context._jvm
        return str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().name())
    except Exception as exc:  # a JVM without log4j 2
        log.debug("cannot read the JVM's log level: %s", exc)
        return "ERROR"


@contextmanager
def private_state_source(path: str | Path, batches: tuple[int | None, ...] = (None,)) -> Iterator[StateSource]:
    """The checkpoint as Spark's readers should see it: a private copy of what loading these batches' state
    reads (Spark's reader writes into the folder it reads; the user's checkpoint must stay as it was)."""
    checkpoint = Checkpoint.open(str(path))
    checkpoint.require()
    latest = checkpoint.latest_committed_batch()
    versions = {(latest if b is None else b) + 1 for b in batches}
    with private_copy(checkpoint, versions) as (root, report):
        yield StateSource(checkpoint.uri, root, Checkpoint.open(str(root)), report)


def _say_local() -> None:
    from tidemark.connect import endpoint, label

    remote = endpoint()
    if remote is not None:
        log.warning(
            "Spark Connect (%s) not used: Spark's state reader reads a private copy of the checkpoint made on this "
            "machine, so a local Spark starts for it (Java needed here)",
            label(remote),
        )


@contextmanager
def state_session(
    path: str | Path, batches: tuple[int | None, ...] = (None,)
) -> Iterator[tuple[SparkSession, StateSource]]:
    """A Spark session ready to read this checkpoint's state; settings it changes are restored on exit.

    Spark reads a private copy of what it needs (formats.private_copy): its state reader writes into the folder it
    reads, and the user's checkpoint must stay as it was.
    """
    from tidemark.session import runtime_conf
    from tidemark.spark.environment import SessionNeeds, spark_session

    require(Feature.STATE_READER)  # one line naming the Spark that has it, before any JVM starts
    # Spark reads a local private copy: no credentials or jars beyond the wheel's are needed.
    # Local even where SPARK_REMOTE is set: the copy is on this machine, where a Connect server may not reach.
    needs = SessionNeeds(app_name="tidemark-state", settings={"spark.sql.session.timeZone": "UTC"}, remote=None)
    _say_local()
    with private_state_source(path, batches) as source, spark_session(needs) as spark:
        # RocksDB stores report to the StateStoreCoordinator, which Spark starts with the streams manager.
        spark.streams.active  # noqa: B018
        # The tools' own joins and counts (diff, compare) shuffle small results: 200 shuffle partitions made
        # `state diff` on a 2-partition checkpoint spend 17 s in task overhead; one per core does it in 5.
        shuffle = {SHUFFLE_PARTITIONS: str(max(2, spark.sparkContext.defaultParallelism))}
        with quiet_jvm(spark), runtime_conf(spark, {**session_conf(source.checkpoint), **shuffle}):
            yield spark, source


def one_line(exc: BaseException) -> str:
    """The useful line of a Spark error: the root Java cause, or the failed task's exception, not the stack."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            cause = java
            while cause.getCause() is not None:
                cause = cause.getCause()
            return f"{cause.getClass().getName()}: {cause.getMessage()}"[:300]
        except Exception:  # the JVM is gone: fall back to the text
            log.debug("cannot walk the Java cause chain", exc_info=True)
    text = str(exc)
    lines = [line.strip().lstrip(": ") for line in text.splitlines()]
    # py4j's own preamble ("An error occurred while calling o88.collect.") says nothing: the next line does.
    first = next(
        (line for line in lines if line and not line.startswith("An error occurred while calling")),
        next((line for line in lines if line), type(exc).__name__),
    )
    marker = "most recent failure:"
    if marker in first:
        tail = first.split(marker, 1)[1]
        first = tail.split("): ", 1)[1] if "): " in tail else tail.strip()
    return first[:300]


def explain_read_error(exc: Exception, source: StateSource, target: ReadTarget, batch: int | None) -> CheckpointError:
    """Turn a Spark reader failure into a one-line CheckpointError that says what to pass instead."""
    text = str(exc)
    first = one_line(exc)
    where = f"operator {target.operator_id} store {target.label}"
    root = source.uri
    if "STDS_COMMITTED_BATCH_UNAVAILABLE" in text or "STDS_OFFSET_LOG_UNAVAILABLE" in text:
        committed = source.checkpoint.commit_batches()
        span = f"{committed[0]}..{committed[-1]}" if committed else "none"
        msg = (
            f"batch {batch} is not a committed batch of {root} (committed batches: {span}): pass --batch in that range"
        )
        return CheckpointError(msg)
    if "INVALID_LOG_VERSION" in text:  # a log entry newer than this Spark reads: say which Spark reads it
        uses = [feature for feature, _ in log_features(source.checkpoint)]
        reason = next((lacking(f) for f in uses if lacking(f)), None)
        msg = f"cannot read {where} of {root}: {reason or first}"
        return CheckpointError(msg)
    if "not allowed for join operator" in text:  # a join store name this Spark's reader does not know
        msg = f"cannot read {where} of {root}: {lacking(Feature.JOIN_STATE_V4) or first}"
        return CheckpointError(msg)
    if "STDS_FAILED_TO_READ_STATE_SCHEMA" in text or "STDS_INVALID_OPTION_VALUE" in text:
        msg = (
            f"cannot read {where} of {root}: Spark found no state schema for it; check --operator/--store "
            "(run 'tidemark state stats' to list them), or rerun the query once on Spark "
            f"{first_line_with(Feature.OPERATOR_METADATA)} or newer to write the metadata"
        )
        return CheckpointError(msg)
    if "STDS_REQUIRED_OPTION_UNSPECIFIED" in text:
        msg = f"cannot read {where}: {first} (for transformWithState pass the state variable as --store)"
        return CheckpointError(msg)
    if "STATE_STORE_PROVIDER_DOES_NOT_SUPPORT" in text or "readChangeFeed" in text:
        msg = f"cannot read the change feed of {where}: {first}"
        return CheckpointError(msg)
    msg = f"cannot read {where} of {root} at batch {batch if batch is not None else 'latest'}: {first}"
    return CheckpointError(msg)


def read_state(
    spark: SparkSession,
    source: StateSource,
    target: ReadTarget,
    batch: int | None = None,
    extra: dict[str, str] | None = None,
) -> DataFrame:
    """The statestore DataFrame of one target (columns key, value or expiration_timestamp_ms, partition_id)."""
    require(Feature.STATE_READER)
    options = reader_options(target, batch)
    options.update(extra or {})
    try:
        frame = spark.read.format("statestore").options(**options).load(str(source.root))
        frame.schema  # noqa: B018 - resolve now so option mistakes surface here, not mid-action
    except Exception as exc:
        raise explain_read_error(exc, source, target, batch) from exc
    return frame


def run_action(action: Any, source: StateSource, target: ReadTarget, batch: int | None) -> Any:
    """Run a Spark action on state; a reader failure becomes a CheckpointError."""
    try:
        return action()
    except Exception as exc:
        raise explain_read_error(exc, source, target, batch) from exc


def _flat(prefix: str, column: Column, data_type: Any) -> list[Column]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        columns: list[Column] = []
        for field in data_type.fields:
            columns.extend(_flat(f"{prefix}_{field.name}", column.getField(field.name), field.dataType))
        return columns
    if isinstance(data_type, ArrayType | MapType):
        return [F.to_json(column).alias(prefix)]
    return [column.alias(prefix)]


def flatten(frame: DataFrame) -> DataFrame:
    """Keys and values as flat columns (key_<field>, value_<field>...); arrays and maps as JSON text."""
    from pyspark.sql import functions as F

    columns: list[Column] = []
    for field in frame.schema.fields:
        columns.extend(_flat(field.name, F.col(field.name), field.dataType))
    return frame.select(*columns)


def parse_key_filter(expression: str | None) -> Column | None:
    """The --key SQL predicate as a Column (it sees the raw key and value structs)."""
    if expression is None:
        return None
    from pyspark.sql import functions as F

    try:
        return F.expr(expression)
    except Exception as exc:
        msg = f"--key {expression!r} is not a valid Spark SQL expression (example: \"key.user_id = 'u1'\")"
        raise UsageError(msg) from exc
