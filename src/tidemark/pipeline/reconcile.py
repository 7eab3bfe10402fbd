"""Quarantine reconciliation: re-extract malformed records a crash kept from being written.

The run writes a batch's malformed records when its progress event arrives, after the batch
committed. A driver that dies in between would lose them silently; at the next start, every
committed batch past the quarantine marker is read again from the files the source log says it
read, and its malformed records are written (idempotently: one file per batch).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemark.checkpoint.handle import Checkpoint
from tidemark.config import TidemarkConfig
from tidemark.pipeline.quarantine import malformed_rows, read_marker, write_batch, write_marker
from tidemark.pipeline.sources import read_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def reconcile_quarantine(spark: SparkSession, config: TidemarkConfig) -> list[int]:
    """Write the malformed records of committed batches the quarantine has not seen; return their ids."""
    if not config.source.is_file:
        return []
    checkpoint = Checkpoint.open(config.checkpoint.location)
    committed = checkpoint.commit_batches()
    if not committed:
        return []
    done = read_marker(config.quarantine.path)
    missing = [b for b in committed if done is None or b > done]
    if not missing:
        return []
    by_batch = checkpoint.source_files_by_batch()
    repaired: list[int] = []
    for batch in missing:
        files = by_batch.get(batch)
        if files:
            rows = malformed_rows(read_files(spark, config, files), config)
            write_batch(config.quarantine.path, batch, rows)
            repaired.append(batch)
    write_marker(config.quarantine.path, committed[-1])
    if repaired:
        log.warning("re-read %d committed batch(es) to write their malformed records: %s", len(repaired), repaired)
    return repaired
