"""`checkpoint prune`: remove only what Spark never needs again to restart with N batches of history."""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tidemark.checkpoint.handle import Checkpoint
from tidemark.checkpoint.layout import (
    COMMITS,
    OFFSETS,
    SNAPSHOT_KINDS,
    STATE,
    TIDEMARK_DIR,
    CommitEntry,
    FileKind,
    classify,
    crc_companions,
    log_batch,
    store_ids,
    zip_references,
)
from tidemark.checkpoint.lock import ensure_unlocked
from tidemark.checkpoint.report import FolderCount, KindCount
from tidemark.errors import CheckpointError, UsageError
from tidemark.storage import Backend, DirListing, Storage, join
from tidemark.storage.journal import Step, finish_pending, journaled

JOURNAL_DIR = f"{TIDEMARK_DIR}/journal"

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


@dataclass
class _Plan:
    sizes: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, list[int]] = field(default_factory=lambda: {k.value: [0, 0] for k in FileKind})
    notes: list[str] = field(default_factory=list)

    def add(self, listing: DirListing, names: Iterable[str], sizes: dict[str, int]) -> None:
        """Mark files of one folder for removal, with their checksum companions."""
        for name in names:
            for candidate in (name, *crc_companions(name)):
                if candidate in sizes:
                    rel = join(listing.rel, candidate)
                    if rel not in self.sizes:
                        self.sizes[rel] = sizes[candidate]
                        counter = self.kinds[classify(candidate)[0].value]
                        counter[0] += 1
                        counter[1] += sizes[candidate]


def _log_removals(plan: _Plan, fs: Storage, folder: str, keep_from: int) -> None:
    listing = fs.list_dir(folder)
    if listing is None:
        return
    sizes = dict(listing.files)
    old = [name for name, _ in listing.files if (b := log_batch(name)) is not None and b < keep_from]
    plan.add(listing, old, sizes)


class _Commits:
    """Commit entries read on demand (checkpoint format v2 needs them to tell valid snapshots apart)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint
        self._cache: dict[int, CommitEntry | None] = {}

    def get(self, batch: int) -> CommitEntry | None:
        if batch not in self._cache:
            self._cache[batch] = self._checkpoint.find_commit(batch)
        return self._cache[batch]


def _valid_snapshot(version: int, unique_id: str | None, op_id: int, partition: int, commits: _Commits) -> bool:
    if unique_id is None:
        return True
    # Format v2: only the attempt the commit log names is in the lineage Spark loads.
    commit = commits.get(version - 1)
    if commit is None or op_id not in commit.state_unique_ids:
        return False
    ids = commit.state_unique_ids[op_id]
    return partition < len(ids) and unique_id in ids[partition]


SHARED_FOLDERS = ("SSTs", "logs")


def _prune_shared_files(
    plan: _Plan, fs: Storage, listing: DirListing, shared: dict[str, DirListing], kept_zips: list[str], where: str
) -> None:
    """Remove RocksDB SST/log files that no kept snapshot refers to."""
    subfolders = [d for d in SHARED_FOLDERS if d in listing.dirs]
    if not subfolders:
        return
    if not kept_zips:
        plan.notes.append(f"{where}: kept its SST files (no snapshot left to tell which are used)")
        return
    referenced: set[str] = set()
    for name in kept_zips:
        try:
            with fs.open_read(join(listing.rel, name)) as handle:
                referenced |= zip_references(handle)
        except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError, OSError) as exc:
            plan.notes.append(f"{where}: kept its SST files ({name} is unreadable: {exc})")
            return
    for sub in subfolders:
        found = shared.get(join(listing.rel, sub))
        if found is None:
            continue
        sizes = dict(found.files)
        unused = [n for n, _ in found.files if classify(n)[0] is not FileKind.CRC and n not in referenced]
        plan.add(found, unused, sizes)


def _prune_store(
    plan: _Plan,
    fs: Storage,
    listing: DirListing,
    shared: dict[str, DirListing],
    ids: tuple[int, int, str],
    bounds: tuple[int, int],
    commits: _Commits,
) -> None:
    op_id, partition, store = ids
    oldest_needed, newest_possible = bounds
    where = f"state/{op_id} partition {partition} store {store}"
    files = []
    for name, _size in listing.files:
        kind, version, unique_id = classify(name)
        if version is not None:
            files.append((name, kind, version, unique_id))
    bases = [
        v
        for _, kind, v, uid in files
        if kind in SNAPSHOT_KINDS and v <= oldest_needed and _valid_snapshot(v, uid, op_id, partition, commits)
    ]
    base = max(bases, default=0)
    remove = [name for name, _, v, _ in files if v < base or v > newest_possible]
    plan.add(listing, remove, dict(listing.files))
    removed = set(remove)
    kept_zips = [name for name, kind, _, _ in files if kind is FileKind.ZIP and name not in removed]
    _prune_shared_files(plan, fs, listing, shared, kept_zips, where)


def _state_removals(plan: _Plan, checkpoint: Checkpoint, bounds: tuple[int, int]) -> None:
    """Plan each store's removals once its listing and its SSTs/ and logs/ listings have all arrived.

    A local walk lists a store before its sub-folders, a flat object-store listing after them: a store
    waits (with the few listings it needs) until both sides are there.
    """
    commits = _Commits(checkpoint)
    fs = checkpoint.store
    waiting: dict[str, DirListing] = {}
    shared: dict[str, DirListing] = {}

    def ready(rel: str) -> bool:
        return all(join(rel, d) in shared for d in SHARED_FOLDERS if d in waiting[rel].dirs)

    def prune(rel: str) -> None:
        ids = store_ids(rel)
        assert ids is not None
        listing = waiting.pop(rel)
        _prune_store(plan, fs, listing, shared, ids, bounds, commits)
        for sub in SHARED_FOLDERS:
            shared.pop(join(rel, sub), None)

    for listing in fs.walk(STATE):
        name = listing.rel.rsplit("/", 1)[-1]
        if name in SHARED_FOLDERS:
            shared[listing.rel] = listing
            owner = listing.rel.rsplit("/", 1)[0]
            if owner in waiting and ready(owner):
                prune(owner)
            continue
        if store_ids(listing.rel) is None:
            continue
        waiting[listing.rel] = listing
        if ready(listing.rel):
            prune(listing.rel)
    for rel in list(waiting):
        prune(rel)


def prune_checkpoint(
    path: str, keep: int, apply: bool = False, backend: Backend = "auto", spark: Any | None = None
) -> PruneResult:
    """Plan (and with apply, do) the removal of log entries and state files older than N committed batches need."""
    if keep < 1:
        msg = f"--keep must be at least 1 (got {keep}): it is how many committed batches of history to keep"
        raise UsageError(msg)
    checkpoint = Checkpoint.open(path, backend, spark)
    fs = checkpoint.store
    if not checkpoint.exists():
        msg = f"checkpoint {path} does not exist: pass the folder given as checkpointLocation"
        raise CheckpointError(msg)
    ensure_unlocked(path, fs)
    finished = finish_pending(fs.location.join(JOURNAL_DIR)) if apply else []
    for result in finished:
        log.warning("finished an interrupted prune: %d file(s) removed", result.deleted_files)
    offset_batches = checkpoint.offset_batches()
    commit_batches = checkpoint.commit_batches()
    if not commit_batches:
        msg = f"checkpoint {path} has no committed batch: nothing is safe to prune (see `tidemark checkpoint inspect`)"
        raise CheckpointError(msg)
    committed = commit_batches[-1]
    latest = max(offset_batches[-1], committed) if offset_batches else committed
    # Spark restarts by reading offsets of the latest batch and the one before it.
    keep_from = max(0, min(committed - keep + 1, latest - 1))
    plan = _Plan()
    _log_removals(plan, fs, OFFSETS, keep_from)
    _log_removals(plan, fs, COMMITS, keep_from)
    # Batch b writes state version b + 1; the planned batch `latest` may have written latest + 1.
    _state_removals(plan, checkpoint, (keep_from + 1, latest + 1))
    paths = sorted(plan.sizes)
    if apply:
        ensure_unlocked(path, fs)  # again: a run may have started while we planned
        # Journaled: a crash part-way leaves the list of what was still to go, and the next prune finishes it.
        steps = [Step(("checkpoint", rel)) for rel in paths]
        journaled(fs.location.join(JOURNAL_DIR), {"checkpoint": fs.uri()}, steps, "prune")
        log.info("removed %d files from %s", len(paths), path)
    folders: dict[str, list[int]] = {}
    for rel, size in plan.sizes.items():
        parts = rel.split("/")
        folder = f"{parts[0]}/{parts[1]}" if parts[0] == STATE else parts[0]
        bucket = folders.setdefault(folder, [0, 0])
        bucket[0] += 1
        bucket[1] += size
    return PruneResult(
        path=path,
        keep=keep,
        applied=apply,
        latest_offset_batch=offset_batches[-1] if offset_batches else None,
        latest_committed_batch=committed,
        keep_from_batch=keep_from,
        files=len(paths),
        bytes=sum(plan.sizes.values()),
        by_folder=[FolderCount(name, f, b) for name, (f, b) in sorted(folders.items())],
        by_kind={k: KindCount(f, b) for k, (f, b) in plan.kinds.items() if f},
        notes=plan.notes,
        paths=paths,
    )
