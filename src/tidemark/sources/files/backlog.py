"""What a landing folder still has to read, and how many bytes past batches read: the file catch-up plan's inputs.

The backlog is the landing folder listed now, minus every file the checkpoint's source log says a batch
already took. Each past batch's bytes are the sizes of the files that batch read, against its duration in the
pipeline's progress log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidemark.config import TidemarkConfig
from tidemark.formats import BatchProgress, Checkpoint
from tidemark.storage import open_storage
from tidemark.storage.uri import parse_location

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
    """None when the landing folder's backlog can be measured; otherwise why not."""
    source = config.source
    if not source.path:
        return "catch-up sizing needs a landing folder"
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
