"""Writing each committed batch's malformed records, from the input that batch read.

The run counts malformed rows in the stream's own scan; once a batch has committed, its records are
written here from the files the source log says it read (a file source) or the offset range the offset
log gives it (Kafka). The same function runs at every start for the committed batches past the
quarantine marker, so a driver that died between a commit and the write loses nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tidemark.context import PipelineContext
from tidemark.formats import Checkpoint
from tidemark.formats import read_quarantine_marker as read_marker
from tidemark.formats import write_quarantine_marker as write_marker
from tidemark.pipeline.quarantine import (
    malformed_frame,
    newest_event_ms,
    unique_records,
    write_batch,
    write_malformed,
)
from tidemark.sources import BatchInput

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.sources import RawStream

log = logging.getLogger(__name__)


def _batch_input(spark: SparkSession, pipeline: PipelineContext, batch: BatchInput | None) -> RawStream | None:
    return pipeline.source.read_input(spark, batch) if batch is not None else None


def batch_newest_event_ms(
    spark: SparkSession, pipeline: PipelineContext, checkpoint: Checkpoint, batch: int
) -> int | None:
    """The newest valid event time (epoch ms) a committed batch read, from its input read again; None when the
    checkpoint does not say what it read."""
    inputs = pipeline.source.committed_inputs(checkpoint, [batch])
    stream = _batch_input(spark, pipeline, inputs.get(batch))
    return newest_event_ms(stream, pipeline.config) if stream is not None else None


def quarantine_batches(
    spark: SparkSession,
    pipeline: PipelineContext,
    upto: int,
    counts: dict[int, int] | None = None,
    records: dict[int, list[dict[str, Any]]] | None = None,
) -> list[int]:
    """Write the malformed records of committed batches past the marker, up to `upto`; return those re-read.

    counts (from the stream's observation) lets batches with no malformed row skip the re-read; records (the same
    observation's records, when it carried them) are written as they are when, once each by source, they are as
    many as the count: a batch is read again only when the stream could not carry its records.
    """
    config, source = pipeline.config, pipeline.source
    if not source.malformed:
        return []
    done = read_marker(config.quarantine.path)
    first = 0 if done is None else done + 1
    if counts is not None and upto >= first and all(counts.get(b) == 0 for b in range(first, upto + 1)):
        # The common case on clean data: every batch since the marker was counted clean by the stream itself
        # (its progress event came after its commit), so there is nothing to read and nothing to list.
        write_marker(config.quarantine.path, upto)
        return []
    checkpoint = Checkpoint.open(config.checkpoint.location)
    committed = [b for b in checkpoint.commit_batches() if (done is None or b > done) and b <= upto]
    if not committed:
        return []
    todo = [b for b in committed if counts is None or counts.get(b, -1) != 0]
    inputs = source.committed_inputs(checkpoint, todo)
    written: list[int] = []
    for batch in todo:
        carried = unique_records(records[batch]) if records and batch in records else None
        if carried is not None and counts is not None and len(carried) == counts.get(batch):
            write_batch(config.quarantine.path, batch, carried)
            log.debug("batch %d: %d malformed record(s) from the stream's own observation", batch, len(carried))
            continue
        stream = _batch_input(spark, pipeline, inputs.get(batch))
        if stream is None:  # never passed in silence: the marker goes past it
            log.warning(
                "batch %d: the checkpoint does not say what it read; its malformed records are not written", batch
            )
            continue
        counted = counts.get(batch, -1) if counts is not None else -1
        expected = counted if counted >= 0 else None  # -1: the stream gave no count (or its plan did not run)
        result = write_malformed(malformed_frame(stream, config, batch), config.quarantine.path, batch, expected)
        if expected is not None and result.count != expected:
            log.warning(
                "batch %d: the stream counted %d malformed rows, the re-read found %d (did the input change?)",
                batch,
                expected,
                result.count,
            )
        written.append(batch)
    write_marker(config.quarantine.path, committed[-1])
    return written


def reconcile_quarantine(spark: SparkSession, pipeline: PipelineContext) -> list[int]:
    """At start: write the malformed records of every committed batch the quarantine has not seen."""
    repaired = quarantine_batches(spark, pipeline, upto=2**62)
    if repaired:
        log.warning("re-read %d committed batch(es) to write their malformed records: %s", len(repaired), repaired)
    return repaired
