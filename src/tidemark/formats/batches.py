"""Which files of a checkpoint belong to which batches: "through batch N" (prune) and "after batch N" (rollback).

The same for compacted logs beside it (compacted_log_through: a file sink's log is pruned through it, by the sink's
package).

Spark's HDFSMetadataLog owns both `purge` and `purgeAfter`; here too one module answers both questions, for the
offsets, commits and source logs, the state store files (with their checksum companions, RocksDB's shared SST
and log files, and checkpoint format v2's unique ids) and transformWithState's operator metadata. Callers keep
their decisions (how much history to keep, which batch to go back to) and ask this module what that means on
disk, and to remove it.
"""

from __future__ import annotations

import logging
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.entries import CommitEntry
from tidemark.formats.layout import (
    COMMITS,
    JOURNAL_DIR,
    OFFSETS,
    SHARED_FOLDERS,
    SNAPSHOT_KINDS,
    SOURCES,
    STATE,
    TIDEMARK_DIR,
    FileKind,
    classify,
    crc_companions,
    is_operator_metadata_v2_dir,
    log_batch,
    log_file_batch,
    store_ids,
)
from tidemark.formats.snapshot_zip import zip_references
from tidemark.steps import step
from tidemark.storage import DirListing, Storage, join
from tidemark.storage.journal import JournalResult, Step, finish_pending, journaled

log = logging.getLogger(__name__)


@dataclass
class FileSet:
    """Files of a checkpoint (paths below it) picked for removal or a move, with sizes, kinds and notes."""

    sizes: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, list[int]] = field(default_factory=lambda: {k.value: [0, 0] for k in FileKind})
    notes: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        """The picked paths, sorted."""
        return sorted(self.sizes)

    def add(self, listing: DirListing, names: Iterable[str], sizes: dict[str, int]) -> None:
        """Pick files of one folder, with their checksum companions."""
        for name in names:
            for candidate in (name, *crc_companions(name)):
                if candidate in sizes:
                    rel = join(listing.rel, candidate)
                    if rel not in self.sizes:
                        self.sizes[rel] = sizes[candidate]
                        counter = self.kinds[classify(candidate)[0].value]
                        counter[0] += 1
                        counter[1] += sizes[candidate]

    def by_top_folder(self) -> dict[str, list[int]]:
        """Files and bytes per offsets, commits, sources and state/<op>."""
        folders: dict[str, list[int]] = {}
        for rel, size in self.sizes.items():
            parts = rel.split("/")
            folder = f"{parts[0]}/{parts[1]}" if parts[0] == STATE else parts[0]
            bucket = folders.setdefault(folder, [0, 0])
            bucket[0] += 1
            bucket[1] += size
        return folders


# --- through batch N: what no restart from a later batch reads -----------------------------------------------


def compacted_log_through(fs: Storage, folder: str, batch: int) -> tuple[DirListing, list[str]] | None:
    """Entries of a compacted log (a file source's `sources/<n>`, a file sink's log) that reading it
    at `batch` or later never needs: every entry before the newest compaction at or below `batch` (a compaction
    holds all entries before it). The rule of Spark's own CompactibleFileStreamLog.deleteExpiredLog, which runs
    at the next batch and deletes them one request at a time (on WASB ~7 requests each, inside that batch)."""
    listing = fs.list_dir(folder)
    if listing is None:
        return None
    parsed = {name: b for name, _ in listing.files if (b := log_file_batch(name)) is not None}
    compactions = [b for b, compact in parsed.values() if compact and b <= batch]
    if not compactions:
        return listing, []
    newest = max(compactions)
    return listing, sorted(name for name, (b, _) in parsed.items() if b < newest)


def _log_through(found: FileSet, fs: Storage, folder: str, last: int) -> None:
    listing = fs.list_dir(folder)
    if listing is None:
        return
    sizes = dict(listing.files)
    old = [name for name, _ in listing.files if (b := log_batch(name)) is not None and b <= last]
    found.add(listing, old, sizes)


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


def _unused_shared_files(
    found: FileSet, fs: Storage, listing: DirListing, shared: dict[str, DirListing], kept_zips: list[str], where: str
) -> None:
    """Pick RocksDB SST/log files that no kept snapshot refers to."""
    subfolders = [d for d in SHARED_FOLDERS if d in listing.dirs]
    if not subfolders:
        return
    if not kept_zips:
        found.notes.append(f"{where}: kept its SST files (no snapshot left to tell which are used)")
        return
    referenced: set[str] = set()
    for name in kept_zips:
        try:
            with fs.open_read(join(listing.rel, name)) as handle:
                referenced |= zip_references(handle)
        except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError, OSError) as exc:
            found.notes.append(f"{where}: kept its SST files ({name} is unreadable: {exc})")
            return
    for sub in subfolders:
        folder = shared.get(join(listing.rel, sub))
        if folder is None:
            continue
        sizes = dict(folder.files)
        unused = [n for n, _ in folder.files if classify(n)[0] is not FileKind.CRC and n not in referenced]
        found.add(folder, unused, sizes)


def _store_through(
    found: FileSet,
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
    found.add(listing, remove, dict(listing.files))
    removed = set(remove)
    kept_zips = [name for name, kind, _, _ in files if kind is FileKind.ZIP and name not in removed]
    _unused_shared_files(found, fs, listing, shared, kept_zips, where)


def _state_through(found: FileSet, checkpoint: Checkpoint, bounds: tuple[int, int]) -> None:
    """Pick each store's files once its listing and its SSTs/ and logs/ listings have all arrived.

    A local walk lists a store before its sub-folders, a flat object-store listing after them: a store
    waits (with the few listings it needs) until both sides are there.
    """
    commits = _Commits(checkpoint)
    fs = checkpoint.store
    waiting: dict[str, DirListing] = {}
    shared: dict[str, DirListing] = {}

    def ready(rel: str) -> bool:
        return all(join(rel, d) in shared for d in SHARED_FOLDERS if d in waiting[rel].dirs)

    def pick(rel: str) -> None:
        ids = store_ids(rel)
        assert ids is not None
        listing = waiting.pop(rel)
        _store_through(found, fs, listing, shared, ids, bounds, commits)
        for sub in SHARED_FOLDERS:
            shared.pop(join(rel, sub), None)

    for listing in fs.walk(STATE):
        name = listing.rel.rsplit("/", 1)[-1]
        if name in SHARED_FOLDERS:
            shared[listing.rel] = listing
            owner = listing.rel.rsplit("/", 1)[0]
            if owner in waiting and ready(owner):
                pick(owner)
            continue
        if store_ids(listing.rel) is None:
            continue
        waiting[listing.rel] = listing
        if ready(listing.rel):
            pick(listing.rel)
    for rel in list(waiting):
        pick(rel)


def files_through(checkpoint: Checkpoint, batch: int, newest_planned: int) -> FileSet:
    """What only batches up to `batch` need: their log entries, and the state files a restart after it never reads.

    A restart from batch N loads state version N (written by batch N - 1): every store keeps the newest snapshot
    at or below the oldest version still needed and what follows it; files of versions after the newest planned
    batch's (orphans of failed attempts) go too, as do RocksDB SST files no kept snapshot lists.
    """
    found = FileSet()
    with step(f"listing {checkpoint.uri}: what batch {batch} and older hold"):
        _log_through(found, checkpoint.store, OFFSETS, batch)
        _log_through(found, checkpoint.store, COMMITS, batch)
        sources = checkpoint.store.list_dir(SOURCES)
        for source in sorted(sources.dirs if sources else []):
            picked = compacted_log_through(checkpoint.store, join(SOURCES, source), batch + 1)
            if picked is not None:
                found.add(picked[0], picked[1], dict(picked[0].files))
        # Batch b writes state version b + 1; the planned batch `newest_planned` may have written newest_planned + 1.
        _state_through(found, checkpoint, (batch + 2, newest_planned + 1))
    return found


# --- after batch N: what rolling back to it takes away ---------------------------------------------------------


def unloadable_stores(checkpoint: Checkpoint, version: int) -> list[str]:
    """Store folders that cannot rebuild a state version (no snapshot with every delta or changelog after it)."""
    stores = checkpoint.stores()
    return [
        f"{STATE}/{op}/{part}" + ("" if name == "default" else f"/{name}")
        for (op, part, name), store in sorted(stores.items())
        if not store.can_load(version)
    ]


def _later(listing: DirListing, names: Iterable[str]) -> list[str]:
    present = {name for name, _ in listing.files}
    return sorted({join(listing.rel, c) for name in names for c in (name, *crc_companions(name)) if c in present})


def files_after(checkpoint: Checkpoint, batch: int, *, keep_planned: bool = False) -> list[str]:
    """Every file a rollback to committed `batch` takes away: log entries and state versions of later batches.

    The logs lose their entries after `batch` (offsets, commits, each source's log), the stores every state
    version after `batch + 1` (the one the next batch loads), transformWithState's metadata its files after
    `batch`; each with its checksum companions. keep_planned keeps the offsets and source logs and the
    operator metadata (Spark then plans the same next batch again and re-runs it: `check --rehearse`).
    """
    store = checkpoint.store
    picked: list[str] = []
    folders = [COMMITS]
    if not keep_planned:
        sources = store.list_dir(SOURCES)
        folders = [OFFSETS, COMMITS, *(join(SOURCES, d) for d in sorted(sources.dirs if sources else []))]
    for folder in folders:
        listing = store.list_dir(folder)
        if listing is not None:
            later = [n for n, _ in listing.files if (parsed := log_file_batch(n)) is not None and parsed[0] > batch]
            picked += _later(listing, later)
    version = batch + 1
    for listing in store.walk(STATE):
        if store_ids(listing.rel) is not None:
            picked += _later(
                listing, [n for n, _ in listing.files if (number := classify(n)[1]) is not None and number > version]
            )
        elif not keep_planned and is_operator_metadata_v2_dir(listing.rel):
            picked += _later(listing, [n for n, _ in listing.files if n.isdigit() and int(n) > batch])
    return picked


# --- removing them ---------------------------------------------------------------------------------------------


def remove_files(
    checkpoint: Checkpoint, paths: list[str], purpose: str, sink: tuple[Storage, list[str]] | None = None
) -> JournalResult | None:
    """Delete files of the checkpoint (and of its sink's log, below `sink`'s store), journaled first: a crash
    part-way leaves what was still to go for the next call of `finish_removals`. The journal's folders go again
    once empty: nothing of tidemark's is left behind."""
    steps = [Step(("checkpoint", rel)) for rel in paths]
    roots = {"checkpoint": checkpoint.store.uri()}
    if sink is not None and sink[1]:
        roots["sink"] = sink[0].uri()
        steps += [Step(("sink", rel)) for rel in sink[1]]
    try:
        return journaled(checkpoint.store.location.join(JOURNAL_DIR), roots, steps, purpose)
    finally:
        _drop_empty_folders(checkpoint)


def finish_removals(checkpoint: Checkpoint) -> list[JournalResult]:
    """Finish what an interrupted `remove_files` left to delete."""
    try:
        return finish_pending(checkpoint.store.location.join(JOURNAL_DIR))
    finally:
        _drop_empty_folders(checkpoint)


def _drop_empty_folders(checkpoint: Checkpoint) -> None:
    """Remove tidemark's journal folder, then `_tidemark/`, when they are empty (local disks; object stores have
    no folders; on HDFS the empty folders stay)."""
    location = checkpoint.store.location
    if not location.is_local:
        return
    for rel in (JOURNAL_DIR, TIDEMARK_DIR):
        try:
            os.rmdir(os.path.join(location.key, rel))
        except OSError:  # not empty (the run lock, the ledger), or not there
            return


def delete_files(checkpoint: Checkpoint, paths: list[str]) -> None:
    """Delete files of a checkpoint nobody else uses (a private copy): no journal."""
    for rel in paths:
        checkpoint.store.delete(rel)
