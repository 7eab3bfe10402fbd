"""`tidemark check --rehearse`: run the new query once on a copy of the checkpoint and report Spark's verdict.

The copy forgets the last commit (and the state versions after it), so Spark plans and runs the last batch
again with the new code: the same input, its state schema checks, its operator checks. The output goes to
Spark's `noop` sink and the copy is removed afterwards; the real checkpoint is only read.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.config import TidemarkConfig
from tidemark.errors import UsageError
from tidemark.formats import Checkpoint, clear_run_lock, delete_files, files_after

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)
_REHEARSAL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Rehearsal:
    """Spark's verdict on running the new query's last batch again, in one line."""

    ok: bool
    verdict: str
    batch: int | None


def _forget_last_commit(copy: Path, batch: int) -> None:
    """Make the copy's last batch planned but not committed, and drop the state it wrote."""
    checkpoint = Checkpoint.open(str(copy))
    delete_files(checkpoint, files_after(checkpoint, batch - 1, keep_planned=True))
    clear_run_lock(checkpoint.store)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return text[:500]


def _wait_for_batch(query: StreamingQuery, batch: int) -> None:
    """Until the batch ran (or the query ended); then stop, so later data is not processed."""
    deadline = time.monotonic() + _REHEARSAL_TIMEOUT_S
    while query.isActive and time.monotonic() < deadline:
        if any(int(p.get("batchId", -1)) >= batch for p in query.recentProgress):
            break
        time.sleep(0.2)
    if query.isActive:
        query.stop()


def rehearse(spark: SparkSession, config: TidemarkConfig) -> Rehearsal:
    """Run the config's query on a throwaway copy of its checkpoint until its last batch ran again."""
    from tidemark.context import PipelineContext
    from tidemark.pipeline.query import build_query
    from tidemark.session import runtime_conf

    checkpoint = Checkpoint.open(config.checkpoint.location)
    if not checkpoint.exists() or not checkpoint.commit_batches():
        return Rehearsal(True, "nothing to rehearse: no committed batch yet, the query starts fresh", None)
    if not checkpoint.store.location.is_local:
        msg = "--rehearse copies the checkpoint locally: it supports local checkpoints only"
        raise UsageError(msg)
    batch = checkpoint.latest_committed_batch()
    from tidemark.steps import step

    with (
        step(f"rehearsing batch {batch} on a copy of the checkpoint"),
        tempfile.TemporaryDirectory(prefix="tidemark-rehearsal-") as work,
    ):
        copy = Path(work) / "checkpoint"
        shutil.copytree(checkpoint.store.location.key, copy)
        _forget_last_commit(copy, batch)
        location = config.checkpoint.model_copy(update={"location": str(copy)})
        rehearsal_config = config.model_copy(update={"checkpoint": location})
        failure: str | None = None
        with runtime_conf(spark, rehearsal_config.spark_conf()):
            try:
                query = (
                    build_query(spark, PipelineContext.of(rehearsal_config))
                    .writeStream.format("noop")
                    .outputMode("append")
                    .option("checkpointLocation", str(copy))
                    .trigger(availableNow=True)
                    .start()
                )
                _wait_for_batch(query, batch)
                error = query.exception()
                failure = None if error is None else _first_line(str(error))
            except Exception as exc:  # the query may fail to start at all (plan or operator checks)
                failure = _first_line(str(exc))
    if failure is not None:
        return Rehearsal(False, f"Spark refused the new query on batch {batch}: {failure}", batch)
    verdict = f"Spark re-ran batch {batch} on a copy of the checkpoint with the new query: accepted"
    return Rehearsal(True, verdict, batch)
