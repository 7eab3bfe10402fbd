"""`checkpoint prune`: remove only what Spark never needs again to restart with N batches of history."""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tidemark.checkpoint.fs import Backend, CheckpointFS, DirListing, join, open_fs
from tidemark.checkpoint.layout import (
    COMMITS,
    OFFSETS,
    SNAPSHOT_KINDS,
    STATE,
    STORE_SUBFOLDERS,
    CommitEntry,
    FileKind,
    classify,
    crc_companions,
    log_batch,
)
from tidemark.checkpoint.lock import ensure_unlocked
from tidemark.checkpoint.report import FolderCount, KindCount
from tidemark.errors import CheckpointError, UsageError

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


def _log_removals(plan: _Plan, fs: CheckpointFS, folder: str, keep_from: int) -> None:
    listing = fs.list_dir(folder)
    if listing is None:
        return
    sizes = dict(listing.files)
    old = [name for name, _ in listing.files if (b := log_batch(name)) is not None and b < keep_from]
    plan.add(listing, old, sizes)


class _Commits:
    """Commit entries read on demand (checkpoint format v2 needs them to tell valid snapshots apart)."""

    def __init__(self, fs: CheckpointFS) -> None:
        self._fs = fs
        self._cache: dict[int, CommitEntry | None] = {}

    def get(self, batch: int) -> CommitEntry | None:
        if batch not in self._cache:
            data = self._fs.read_bytes(f"{COMMITS}/{batch}")
            try:
                self._cache[batch] = CommitEntry.parse(batch, data.decode()) if data is not None else None
            except ValueError:
                self._cache[batch] = None
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


def _zip_references(data: bytes) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        text = archive.read("metadata").decode()
    lines = [line for line in text.splitlines() if line.strip()]
    meta: dict[str, Any] = json.loads(lines[1] if lines[0].startswith("v") else lines[0])
    names = {str(f["dfsSstFileName"]) for f in meta.get("sstFiles", [])}
    names |= {str(f["dfsLogFileName"]) for f in meta.get("logFiles", [])}
    return names


def _prune_shared_files(plan: _Plan, fs: CheckpointFS, listing: DirListing, kept_zips: list[str], where: str) -> None:
    """Remove RocksDB SST/log files that no kept snapshot refers to."""
    subfolders = [d for d in ("SSTs", "logs") if d in listing.dirs]
    if not subfolders:
        return
    if not kept_zips:
        plan.notes.append(f"{where}: kept its SST files (no snapshot left to tell which are used)")
        return
    referenced: set[str] = set()
    for name in kept_zips:
        try:
            referenced |= _zip_references(fs.read_bytes(join(listing.rel, name)) or b"")
        except (zipfile.BadZipFile, KeyError, ValueError, IndexError) as exc:
            plan.notes.append(f"{where}: kept its SST files ({name} is unreadable: {exc})")
            return
    for sub in subfolders:
        shared = fs.list_dir(join(listing.rel, sub))
        if shared is None:
            continue
        sizes = dict(shared.files)
        unused = [n for n, _ in shared.files if classify(n)[0] is not FileKind.CRC and n not in referenced]
        plan.add(shared, unused, sizes)


def _prune_store(
    plan: _Plan,
    fs: CheckpointFS,
    listing: DirListing,
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
    _prune_shared_files(plan, fs, listing, kept_zips, where)


def _state_removals(plan: _Plan, fs: CheckpointFS, bounds: tuple[int, int]) -> None:
    commits = _Commits(fs)
    for listing in fs.walk(STATE):
        parts = listing.rel.split("/")
        # state/<op>/<partition>[/<store>]; skip _metadata, SSTs and logs folders (handled with their store).
        if len(parts) < 3 or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        rest = parts[3:]
        if len(rest) > 1 or (rest and rest[0] in STORE_SUBFOLDERS):
            continue
        store = rest[0] if rest else "default"
        _prune_store(plan, fs, listing, (int(parts[1]), int(parts[2]), store), bounds, commits)


def prune_checkpoint(
    path: str, keep: int, apply: bool = False, backend: Backend = "auto", spark: Any | None = None
) -> PruneResult:
    """Plan (and with apply, do) the removal of log entries and state files older than N committed batches need."""
    if keep < 1:
        msg = f"--keep must be at least 1 (got {keep}): it is how many committed batches of history to keep"
        raise UsageError(msg)
    fs = open_fs(path, backend, spark)
    if not fs.exists(""):
        msg = f"checkpoint {path} does not exist: pass the folder given as checkpointLocation"
        raise CheckpointError(msg)
    ensure_unlocked(path, fs)
    offsets = fs.list_dir(OFFSETS)
    commits = fs.list_dir(COMMITS)
    offset_batches = sorted(b for n, _ in (offsets.files if offsets else []) if (b := log_batch(n)) is not None)
    commit_batches = sorted(b for n, _ in (commits.files if commits else []) if (b := log_batch(n)) is not None)
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
    _state_removals(plan, fs, (keep_from + 1, latest + 1))
    paths = sorted(plan.sizes)
    if apply:
        ensure_unlocked(path, fs)  # again: a run may have started while we planned
        for rel in paths:
            fs.delete(rel)
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
