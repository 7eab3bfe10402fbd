"""The pipeline's recent batches, from its own progress log: the history every catch-up plan is fitted on."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tidemark.errors import TidemarkError
from tidemark.formats import BatchProgress, iter_progress, progress_log_files

log = logging.getLogger(__name__)

# The newest batches with input that the throughput is fitted on.
HISTORY_BATCHES = 50


def recent_progress(monitor_dir: str, query_id: str | None, limit: int = HISTORY_BATCHES) -> list[BatchProgress]:
    """The newest `limit` batches that read input, from the newest run logs of the pipeline's progress log."""
    try:
        files = progress_log_files(monitor_dir)
    except TidemarkError:
        return []
    chunks: list[list[BatchProgress]] = []
    found = 0
    # Run logs are named by run id, which sorts by start time: read from the newest until enough batches.
    for file in reversed(files):
        batches = [
            p
            for p in iter_progress(file)
            if p.num_input_rows > 0 and p.batch_duration_ms > 0 and (query_id is None or p.query_id == query_id)
        ]
        chunks.append(batches)
        found += len(batches)
        if found >= limit:
            break
    ordered = [batch for chunk in reversed(chunks) for batch in chunk]
    return ordered[-limit:]


def peak_state_bytes(progress: Iterable[BatchProgress]) -> int:
    """The largest state the recent batches reported (memoryUsedBytes over operators)."""
    return max((p.state_memory_bytes for p in progress), default=0)
