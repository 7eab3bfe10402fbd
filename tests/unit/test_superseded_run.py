"""Which failed queries over Spark Connect are an earlier run's batch colliding with this run's (SUPERSEDED_RUN: the
batch simply runs again), decided by the sink's `concurrent_write_errors`; checked on failure texts shaped as Spark
Connect hands them back, never on the marker itself."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.pipeline.run import _superseded_run
from tidemark.sinks import sink_of

ICEBERG = {"format": "iceberg", "path": None, "table": "lake.clicks", "catalog": {"type": "hadoop", "warehouse": "w"}}

# A foreachBatch function's failure as a Spark Connect client gets it from query.exception(): the server's Python
# worker's traceback, whose last exception is the worker's own Connect client's (the server's message, then the JVM
# stack trace Connect adds, spark.sql.connect.serverStacktrace.enabled being on by default, headed by the
# exception's class). The messages are Iceberg 1.12's own (HadoopTableOperations.renameToFinal, JdbcTableOperations).
_WORKER = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch \
sink. Reason: An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/opt/spark/python/pyspark/sql/connect/streaming/worker/foreach_batch_worker.py", line 90, in process
    func(batch_df, batch_id)
  File "/usr/lib/python3/site-packages/tidemark/sinks/iceberg/sink.py", line 407, in write_batch
    .append()
pyspark.errors.exceptions.connect.UnknownException: {message}

JVM stacktrace:
{cls}
\tat {at}
\tat org.apache.iceberg.BaseTransaction.commitSimpleTransaction(BaseTransaction.java:425)
\tat org.apache.iceberg.SnapshotProducer.lambda$commit$2(SnapshotProducer.java:429)
\tat org.apache.iceberg.util.Tasks$Builder.runTaskWithRetry(Tasks.java:413)
"""
HADOOP_LOST = _WORKER.format(
    message="Version 7 already exists: file:/data/warehouse/lake/clicks/metadata/v7.metadata.json",
    cls="org.apache.iceberg.exceptions.CommitFailedException",
    at="org.apache.iceberg.hadoop.HadoopTableOperations.renameToFinal(HadoopTableOperations.java:368)",
)
JDBC_LOST = _WORKER.format(
    message="Cannot commit lake.clicks: metadata location file:/w/lake/clicks/metadata/00008-1f0c.metadata.json has "
    "changed from file:/w/lake/clicks/metadata/00007-9ab2.metadata.json",
    cls="org.apache.iceberg.exceptions.CommitFailedException",
    at="org.apache.iceberg.jdbc.JdbcTableOperations.doCommit(JdbcTableOperations.java:142)",
)
# Not a lost race: the commit may or may not have landed (the rerun's check of the history decides), and an unknown
# state is no other run's doing; a missing table is a setup problem.
UNKNOWN_STATE = _WORKER.format(
    message="Commit status unknown: java.net.SocketTimeoutException: Read timed out",
    cls="org.apache.iceberg.exceptions.CommitStateUnknownException",
    at="org.apache.iceberg.jdbc.JdbcTableOperations.doCommit(JdbcTableOperations.java:150)",
)
NO_TABLE = _WORKER.format(
    message="[TABLE_OR_VIEW_NOT_FOUND] The table or view `tidemark_iceberg`.`lake`.`clicks` cannot be found.",
    cls="org.apache.spark.sql.catalyst.analysis.NoSuchTableException",
    at="org.apache.spark.sql.errors.QueryCompilationErrors$.noSuchTableError(QueryCompilationErrors.scala:1510)",
)

# A query that lost its batch's log entry to another run of it, as a Spark Connect client gets it from
# query.exception() (Spark 4.1's StreamExecution wraps the cause in STREAM_FAILED; its messages are Spark's own).
_LOG_LOST = """[STREAM_FAILED] Query [id = 440c26d6-9ceb-43de-a8d1-3b99ff0cd9c2, runId = \
4245431d-b4f6-48ef-b5eb-63956768c28f] terminated with exception: {message} SQLSTATE: XXKST

JVM stacktrace:
org.apache.spark.sql.streaming.StreamingQueryException
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.runStream(StreamExecution.scala:392)
Caused by: {cls}: {message}
\tat org.apache.spark.sql.execution.streaming.checkpointing.HDFSMetadataLog.write(HDFSMetadataLog.scala:213)
"""
# The batch's offsets file was there when this run came to write it.
LOG_THERE = _LOG_LOST.format(
    message="[CONCURRENT_STREAM_LOG_UPDATE] Concurrent update to the log. Multiple streaming jobs detected for 3. "
    "Please make sure only one streaming job runs on a specific checkpoint location at a time. SQLSTATE: 40000",
    cls="org.apache.spark.SparkException",
)
# The other run's rename won while this run wrote it (Spark logs this one without an error class).
LOG_RENAME_LOST = _LOG_LOST.format(
    message="Multiple streaming queries are concurrently using file:/data/checkpoint/offsets.",
    cls="org.apache.spark.SparkConcurrentModificationException",
)


class _ConnectSession:
    """What `is_connect` sees of a Spark Connect session: a class from pyspark.sql.connect."""


_ConnectSession.__module__ = "pyspark.sql.connect.session"


class _LocalSession:
    """A classic (py4j) session."""


class _Monitor:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, event: str, **fields: Any) -> None:
        self.records.append({"event": event, **fields})


def _superseded(tmp_path: Path, session: object, failure: str, sink: dict[str, Any] = ICEBERG) -> tuple[bool, _Monitor]:
    pipeline = SimpleNamespace(sink=sink_of(load_config(write_config(tmp_path, sink=sink))))
    monitor = _Monitor()
    warnings: list[str] = []
    found = _superseded_run(session, pipeline, failure, monitor, warnings, None)  # type: ignore[arg-type]
    assert len(warnings) == int(found)
    return found, monitor


@pytest.mark.parametrize("failure", [HADOOP_LOST, JDBC_LOST], ids=["hadoop-catalog", "jdbc-catalog"])
def test_an_iceberg_commit_that_lost_its_race_over_connect_is_a_superseded_run(tmp_path: Path, failure: str) -> None:
    found, monitor = _superseded(tmp_path, _ConnectSession(), failure)
    assert found
    assert [(r["event"], r["code"]) for r in monitor.records] == [("warning", "SUPERSEDED_RUN")]


@pytest.mark.parametrize("failure", [UNKNOWN_STATE, NO_TABLE], ids=["commit-state-unknown", "no-table"])
def test_other_iceberg_failures_are_not(tmp_path: Path, failure: str) -> None:
    found, monitor = _superseded(tmp_path, _ConnectSession(), failure)
    assert not found and monitor.records == []


def test_a_lost_commit_is_no_superseded_run_in_a_local_session_or_for_another_sink(tmp_path: Path) -> None:
    # A local run holds its run lock for its whole query: no earlier run of it can still be writing.
    assert not _superseded(tmp_path, _LocalSession(), HADOOP_LOST)[0]
    # Each sink names its own: a Parquet sink's run does not take Iceberg's lost race for its own.
    assert not _superseded(tmp_path, _ConnectSession(), HADOOP_LOST, {"format": "parquet", "path": "output"})[0]


@pytest.mark.parametrize("failure", [LOG_THERE, LOG_RENAME_LOST], ids=["offsets-there", "rename-lost"])
@pytest.mark.parametrize("sink", [{"format": "delta", "path": "output"}, {"format": "parquet", "path": "output"}])
def test_a_batch_of_spark_s_log_lost_to_another_run_over_connect_is_a_superseded_run_for_any_sink(
    tmp_path: Path, failure: str, sink: dict[str, Any]
) -> None:
    found, monitor = _superseded(tmp_path, _ConnectSession(), failure, sink)
    assert found
    assert [(r["event"], r["code"]) for r in monitor.records] == [("warning", "SUPERSEDED_RUN")]
    # Locally the run lock keeps a second run out: the same text there is a failure to report.
    assert not _superseded(tmp_path, _LocalSession(), failure, sink)[0]
