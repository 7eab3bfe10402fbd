"""A Kafka source's offsets as a checkpoint holds them: where each batch ended, where the next one starts.

The committed offset of a partition is where the next batch starts reading it: the end offsets of the newest
committed batch (`offsets/<batch>`), or the query's initial offsets (`sources/0/0`) before its first commit. A
planned but uncommitted batch is re-run from there by Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidemark.formats import Checkpoint
from tidemark.formats.kafka_offsets import Offsets, parse_offsets

if TYPE_CHECKING:
    from tidemark.formats import OffsetEntry


def batch_offsets(checkpoint: Checkpoint, batch: int) -> Offsets | None:
    """Where a batch ended, per partition; None when its offsets entry holds no Kafka offsets."""
    entry = checkpoint.find_offset(batch)
    if entry is None or not entry.source_offsets:
        return None
    return parse_offsets(entry.source_offsets[0])


def committed_offsets(checkpoint: Checkpoint) -> Offsets | None:
    """Where the next batch starts reading each partition; None when the checkpoint holds no Kafka offsets."""
    commits = checkpoint.commit_batches()
    if commits:
        return batch_offsets(checkpoint, commits[-1])
    if checkpoint.offset_batches():
        return parse_offsets(checkpoint.source_initial_offsets())
    return None


def planned_offsets(checkpoint: Checkpoint) -> Offsets | None:
    """Where the newest planned batch ends; None without one."""
    offsets = checkpoint.offset_batches()
    return batch_offsets(checkpoint, offsets[-1]) if offsets else None


def batch_range(
    checkpoint: Checkpoint, batch: int, find: Callable[[int], OffsetEntry | None] | None = None
) -> tuple[str | None, str] | None:
    """(start, end) offset JSON of one Kafka micro-batch: the batch before's end (batch 0: the query's
    initial offsets in sources/0/0) and its own end; None when the offset log does not say. find: the offsets
    entry of a batch (default: read from the checkpoint)."""
    find = find or checkpoint.find_offset
    end = find(batch)
    if end is None or not end.source_offsets or not isinstance(end.source_offsets[0], dict):
        return None
    start: Any = None
    if batch > 0:
        before = find(batch - 1)
        start = before.source_offsets[0] if before is not None and before.source_offsets else None
    else:
        start = checkpoint.source_initial_offsets()
    return (json.dumps(start) if isinstance(start, dict) else None), json.dumps(end.source_offsets[0])
