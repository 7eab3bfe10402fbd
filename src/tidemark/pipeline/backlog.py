"""What a file source still has to read, and how fast past batches read: the inputs of the catch-up plan.

The backlog is the landing folder listed now, minus every file the checkpoint's source log says a batch
already took. The throughput comes from the pipeline's own progress log (its newest runs): each batch's
duration against the bytes of the files that batch read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidemark.config import TidemarkConfig
from tidemark.errors import TidemarkError
from tidemark.formats import BatchProgress, Checkpoint, iter_progress, progress_log_files
from tidemark.sources import BacklogKind, source_of
from tidemark.storage import open_storage
from tidemark.storage.uri import parse_location

log = logging.getLogger(__name__)

# The newest batches with input that the throughput is fitted on.
HISTORY_BATCHES = 50
_GLOB = set("*?[{")
FileKey = tuple[str, str, str]


@dataclass(frozen=True)
class LandingFile:
    """One file of the landing folder."""

    key: FileKey
    size: int
    mtime: float


@dataclass(frozen=True)
class Backlog:
    """The landing folder against the source log: what is waiting, in the order Spark reads it."""

    pending: tuple[LandingFile, ...]
    sizes_by_key: Mapping[FileKey, int]  # every landing file, read or not
    query_id: str | None  # the checkpoint's query id (None before the first start)

    @property
    def pending_bytes(self) -> int:
        """Total size of the pending files."""
        return sum(f.size for f in self.pending)


def file_key(uri: str) -> FileKey:
    """A file's identity whatever the spelling: Spark's `file:///x` and the plain path `/x` are the same file."""
    location = parse_location(uri)
    return (location.kind.value, location.bucket, location.key)


def _visible(rel: str) -> bool:
    # Spark's file index skips names starting with '_' or '.' (metadata, temporary and checksum files).
    return not any(part.startswith(("_", ".")) for part in rel.split("/"))


def list_landing(path: str) -> list[LandingFile]:
    """Every visible file below the landing folder."""
    store = open_storage(path)
    return [
        LandingFile(file_key(store.uri(entry.rel)), entry.size, entry.mtime or 0.0)
        for entry in store.list_files("")
        if _visible(entry.rel)
    ]


def supports_backlog(config: TidemarkConfig) -> str | None:
    """None when the backlog can be measured; otherwise why not."""
    source = config.source
    if source_of(config).backlog is not BacklogKind.FILES or not source.path:
        return "catch-up sizing needs a file source"
    if any(ch in source.path for ch in _GLOB):
        return "catch-up sizing needs a landing folder, not a glob pattern"
    return None


def read_backlog(config: TidemarkConfig) -> Backlog:
    """List the landing folder and the source log; pending files in Spark's order (oldest first, or newest)."""
    assert config.source.path is not None
    files = list_landing(config.source.path)
    seen: set[FileKey] = set()
    checkpoint = Checkpoint.open(config.checkpoint.location)
    query_id = None
    if checkpoint.exists():
        query_id = checkpoint.query_id()
        # Every entry of the source log, including one planned for a batch that has not committed yet: Spark
        # re-runs that batch with exactly those files.
        seen = {file_key(path) for paths in checkpoint.source_files_by_batch().values() for path in paths}
    pending = [f for f in files if f.key not in seen]
    newest_first = str(config.source.options.get("latestFirst", "false")).lower() == "true"
    pending.sort(key=lambda f: (f.mtime, f.key), reverse=newest_first)
    return Backlog(tuple(pending), {f.key: f.size for f in files}, query_id)


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


def files_of_batches(checkpoint_location: str, batches: Sequence[int]) -> dict[int, tuple[FileKey, ...]]:
    """The files each query batch read (through its offsets' logOffset: batch and source log ids drift apart)."""
    checkpoint = Checkpoint.open(checkpoint_location)
    if not batches or not checkpoint.exists():
        return {}
    return {b: tuple(file_key(p) for p in paths) for b, paths in checkpoint.source_files_of(list(batches)).items()}


def batch_samples(
    progress: Iterable[BatchProgress],
    files: Mapping[int, Sequence[FileKey]],
    sizes: Mapping[FileKey, int],
) -> list[tuple[int, float]]:
    """(bytes read, duration ms) of past batches whose files are all still in the landing folder."""
    samples: list[tuple[int, float]] = []
    for batch in progress:
        keys = files.get(batch.batch_id)
        if not keys or any(key not in sizes for key in keys):
            continue
        samples.append((sum(sizes[key] for key in keys), float(batch.batch_duration_ms)))
    return samples


def peak_state_bytes(progress: Iterable[BatchProgress]) -> int:
    """The largest state the recent batches reported (memoryUsedBytes over operators)."""
    return max((p.state_memory_bytes for p in progress), default=0)
