"""`checkpoint prune`: remove only what Spark never needs again to restart with N batches of history."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tidemark.doctor.report import FolderCount, KindCount
from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import (
    Checkpoint,
    ensure_unlocked,
    files_through,
    finish_removals,
    remove_files,
)
from tidemark.sinks import reader_of
from tidemark.storage import Backend, open_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PruneResult:
    """What prune removed (or, in a dry run, would remove) and what it kept."""

    path: str
    keep: int
    applied: bool
    latest_offset_batch: int | None
    latest_committed_batch: int
    keep_from_batch: int
    files: int
    bytes: int
    by_folder: list[FolderCount]
    by_kind: dict[str, KindCount]
    notes: list[str]
    paths: list[str] = field(default_factory=list)
    history_from_batch: int | None = None  # C - keep + 1: the oldest of the N committed batches kept
    finished_files: int = 0  # removed now to finish a prune an interruption left part-way
    finished_already_gone: int = 0  # files that interrupted prune had removed before it stopped
    sink: str | None = None  # the sink whose own log was pruned too (--sink: a file sink's)
    sink_paths: list[str] = field(default_factory=list)  # below the sink folder


def prune_checkpoint(
    path: str,
    keep: int,
    apply: bool = False,
    backend: Backend = "auto",
    spark: Any | None = None,
    sink: str | None = None,
) -> PruneResult:
    """Plan (and with apply, do) the removal of log entries and state files older than N committed batches need;
    with `sink` (a file sink's folder), its log's entries before the compaction those batches read."""
    if keep < 1:
        msg = f"--keep must be at least 1 (got {keep}): it is how many committed batches of history to keep"
        raise UsageError(msg)
    checkpoint = Checkpoint.open(path, backend, spark)
    checkpoint.require(planned=False)
    ensure_unlocked(path, checkpoint.store)
    finished = finish_removals(checkpoint) if apply else []
    offset_batches = checkpoint.offset_batches()
    commit_batches = checkpoint.commit_batches()
    if not commit_batches:
        msg = f"checkpoint {path} has no committed batch: nothing is safe to prune (see `tidemark checkpoint inspect`)"
        raise CheckpointError(msg)
    committed = commit_batches[-1]
    latest = max(offset_batches[-1], committed) if offset_batches else committed
    # Spark restarts by reading offsets of the latest batch and the one before it.
    keep_from = max(0, min(committed - keep + 1, latest - 1))
    found = files_through(checkpoint, keep_from - 1, latest)
    paths = found.paths
    by_folder = [FolderCount(name, f, b) for name, (f, b) in sorted(found.by_top_folder().items())]
    sink_store = open_storage(sink) if sink else None
    trim = reader_of(sink_store).log_through(sink_store, keep_from) if sink_store is not None else None
    sink_paths, sink_bytes = (list(trim.paths), trim.bytes) if trim is not None else ([], 0)
    if trim is not None and sink_paths:
        by_folder.append(FolderCount(trim.label, len(sink_paths), sink_bytes))
    if apply:
        ensure_unlocked(path, checkpoint.store)  # again: a run may have started while we planned
        # Journaled: a crash part-way leaves the list of what was still to go, and the next prune finishes it.
        remove_files(checkpoint, paths, "prune", (sink_store, sink_paths) if sink_store is not None else None)
        log.info("removed %d files from %s and %d from its sink log", len(paths), path, len(sink_paths))
    return PruneResult(
        path=path,
        keep=keep,
        applied=apply,
        latest_offset_batch=offset_batches[-1] if offset_batches else None,
        latest_committed_batch=committed,
        keep_from_batch=keep_from,
        files=len(paths) + len(sink_paths),
        bytes=sum(found.sizes.values()) + sink_bytes,
        by_folder=by_folder,
        by_kind={k: KindCount(f, b) for k, (f, b) in found.kinds.items() if f},
        notes=found.notes,
        paths=paths,
        history_from_batch=max(0, committed - keep + 1),
        finished_files=sum(r.deleted_files for r in finished),
        finished_already_gone=sum(r.already_done for r in finished),
        sink=sink,
        sink_paths=sink_paths,
    )
