"""State store files: what loading a version needs, RocksDB zips' references, and copying that into a cache.

Copy what Spark's state readers need of a remote checkpoint, and only that, into a local cache.

To load state version V a store needs its newest snapshot at or below V (HDFS `.snapshot`, RocksDB
`.zip` and the SST files that zip lists) and every delta or changelog after it up to V. The logs,
the metadata file and the operator and schema metadata are small and copied whole.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.cache import cache_root
from tidemark.errors import CheckpointError
from tidemark.formats.clone import own_schema_paths
from tidemark.formats.layout import (
    COMMITS,
    METADATA,
    NON_STORE_FOLDERS,
    OFFSETS,
    REPLAY_KINDS,
    SNAPSHOT_KINDS,
    STATE,
    FileKind,
    classify,
    crc_companions,
)
from tidemark.formats.snapshot_zip import zip_references
from tidemark.storage import FileEntry, join

if TYPE_CHECKING:
    from tidemark.formats.checkpoint import Checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchReport:
    """What a fetch copied: files and bytes fetched now, bytes found already in the cache, where it went."""

    source: str
    cache: str
    files: int
    bytes_fetched: int
    bytes_cached: int


def cache_folder(uri: str) -> Path:
    """The local folder that mirrors one checkpoint URI."""
    digest = hashlib.sha256(uri.encode("utf-8")).hexdigest()[:16]
    return cache_root() / "checkpoints" / digest


def _store_folder(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != STATE or not parts[1].isdigit() or not parts[2].isdigit():
        return False
    rest = parts[3:]
    return not rest or (len(rest) == 1 and rest[0] not in NON_STORE_FOLDERS)


def _versions_needed(names: Iterable[str], version: int) -> set[str]:
    """File names of one store folder that loading `version` reads."""
    by_version: dict[int, list[tuple[str, FileKind]]] = {}
    for name in names:
        kind, number, _ = classify(name)
        if number is not None and number <= version:
            by_version.setdefault(number, []).append((name, kind))
    snapshots = [v for v, files in by_version.items() if any(k in SNAPSHOT_KINDS for _, k in files)]
    base = max(snapshots, default=0)
    needed = {n for n, k in by_version.get(base, []) if k in SNAPSHOT_KINDS}
    for number, files in by_version.items():
        if base < number <= version:
            needed.update(n for n, k in files if k in REPLAY_KINDS)
    return needed


@dataclass(frozen=True)
class Needed:
    """What loading some state versions reads: files by path, and each store's SSTs/ and logs/ names."""

    files: list[str]
    shared: dict[str, set[str]]  # "state/<op>/<part>[/<store>]/SSTs" -> file names there
    entries: dict[str, FileEntry] = field(default_factory=dict)  # what the listings said of each file


def files_for_versions(checkpoint: Checkpoint, versions: set[int]) -> Needed:
    """Paths (below the checkpoint) a state reader needs to load the given state versions."""
    store = checkpoint.store
    wanted: set[str] = {METADATA}
    entries: dict[str, FileEntry] = {}
    metadata = store.stat(METADATA)
    if metadata is not None:
        entries[METADATA] = metadata
    for folder in (OFFSETS, COMMITS):
        for entry in store.list_files(folder):
            if entry.rel.rpartition("/")[2].isdigit():
                wanted.add(entry.rel)
                entries[entry.rel] = entry
    store_files: dict[str, list[str]] = {}
    shared: dict[str, set[str]] = {}
    for entry in store.list_files(STATE):
        entries[entry.rel] = entry
        folder, _, name = entry.rel.rpartition("/")
        if name.endswith(".crc"):
            continue
        if _store_folder(folder):
            store_files.setdefault(folder, []).append(name)
        elif folder.rsplit("/", 1)[-1] in ("SSTs", "logs"):
            shared.setdefault(folder, set()).add(name)
        else:
            wanted.add(entry.rel)  # operator metadata, state schemas, per-partition schema files
    for folder, names in store_files.items():
        needed: set[str] = set()
        for version in versions:
            needed |= _versions_needed(names, version)
        wanted.update(join(folder, n) for n in needed)
    return Needed(sorted(wanted), shared, entries)


# Files fetched at once: a restart's state is thousands of small files, each a round trip (20-100 ms on a cloud
# store), so one at a time took 18 minutes for the 20,400 files of the seed incident's pruned checkpoint.
FETCH_THREADS = 16


def fetch_state(checkpoint: Checkpoint, versions: set[int], target: Path | None = None) -> tuple[Path, FetchReport]:
    """Make a local folder hold what loading these state versions needs, and nothing else.

    The files are those the listings named (their sizes too: no request per file to learn it), fetched FETCH_THREADS
    at a time; a RocksDB snapshot's SST files are known once its zip is here, so they follow in a second round.
    A file already in the folder is kept only when the listing shows the very file fetched before (its size,
    modification time and version tag, kept beside the files in FETCHED): a checkpoint rewritten under the same URI
    (`state repartition` in place, a checkpoint deleted and started again) has files of the same names and often
    the same sizes. Files the versions do not need are removed, so the folder never shows a reader partitions or
    versions the checkpoint no longer has.
    """
    if checkpoint.store.location.is_local:
        root = Path(checkpoint.store.location.key)
        return root, FetchReport(checkpoint.uri, str(root), 0, 0, 0)
    folder = target or cache_folder(checkpoint.uri)
    needed = files_for_versions(checkpoint, versions)
    before = _read_fetched(folder)
    (folder / FETCHED).unlink(missing_ok=True)  # a fetch killed half way trusts nothing it left
    now: dict[str, list[object]] = {}
    fetched = cached = files = 0
    pending = list(needed.files)
    with ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="tidemark-fetch") as pool:
        while pending:
            rels, pending = pending, []
            fetch = lambda rel: _fetch_one(checkpoint, folder, rel, needed.entries.get(rel), before)  # noqa: E731
            for rel, got in zip(rels, pool.map(fetch, rels), strict=True):
                if got is None:  # gone since the listing (Spark's maintenance), or never there
                    continue
                files += 1
                fetched += got[0]
                cached += got[1]
                now[rel] = got[2]
                if classify(Path(rel).name)[0] is FileKind.ZIP:
                    pending.extend(_sst_paths(rel, folder / rel, needed.shared))
    _remove_unneeded(folder, set(now))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FETCHED).write_text(json.dumps(now, sort_keys=True))
    log.info("fetched %d bytes of %s into %s (%d bytes already cached)", fetched, checkpoint.uri, folder, cached)
    return folder, FetchReport(checkpoint.uri, str(folder), files, fetched, cached)


# Beside the fetched files: each one's identity on the store when it was fetched (rel -> [size, mtime, etag]).
FETCHED = ".tidemark-fetched.json"


def _identity(entry: FileEntry) -> list[object]:
    return [entry.size, entry.mtime, entry.etag]


def _read_fetched(folder: Path) -> dict[str, list[object]]:
    try:
        known = json.loads((folder / FETCHED).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _fetch_one(
    checkpoint: Checkpoint, folder: Path, rel: str, entry: FileEntry | None, before: dict[str, list[object]]
) -> tuple[int, int, list[object]] | None:
    """(bytes fetched, bytes already cached, the file's identity) of one file, or None when it is not on the
    store."""
    if entry is None:
        entry = checkpoint.store.stat(rel)
        if entry is None:
            return None
    identity = _identity(entry)
    local = folder / rel
    known = entry.mtime is not None or entry.etag is not None
    if known and before.get(rel) == identity and local.exists() and local.stat().st_size == entry.size:
        return 0, entry.size, identity
    try:
        return checkpoint.store.download(rel, str(local)), 0, identity
    except FileNotFoundError:
        return None


def _remove_unneeded(folder: Path, keep: set[str]) -> None:
    """Remove from the fetch folder every file (and then empty folder) that is not one of `keep`."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        rel = path.relative_to(folder).as_posix()
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif rel not in keep and rel != FETCHED:
            path.unlink()


def _sst_paths(zip_rel: str, local: Path, shared: dict[str, set[str]]) -> list[str]:
    store_folder = zip_rel.rsplit("/", 1)[0]
    try:
        references = zip_references(local.read_bytes())
    except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError) as exc:
        msg = f"the RocksDB snapshot {zip_rel} is unreadable ({exc}): the checkpoint is corrupt"
        raise CheckpointError(msg) from exc
    found: list[str] = []
    for sub in ("SSTs", "logs"):
        names = shared.get(join(store_folder, sub), set())
        found.extend(join(join(store_folder, sub), n) for n in sorted(references & names))
    return found


def _link_or_copy(source: str, target: Path) -> int:
    """A hard link (same file system), else a symbolic link, else a copy: never gigabytes of state copied just to
    be read, and the original is never opened for writing (Spark's readers only add files of their own)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        try:
            os.symlink(source, target)
        except OSError:
            shutil.copy2(source, target)
    return target.stat().st_size


@contextmanager
def private_copy(checkpoint: Checkpoint, versions: set[int]) -> Iterator[tuple[Path, FetchReport | None]]:
    """A local folder holding what loading these state versions reads, for Spark's readers to write into.

    Spark's statestore reader writes into the checkpoint it reads (empty `state/<op>/<part>/_metadata` folders,
    schema files): read-only commands hand it this copy instead. Local files are linked (hard links, symbolic
    links across file systems) with their checksum companions into a temporary folder removed on exit; a remote
    checkpoint is fetched into tidemark's cache as before.
    """
    if not checkpoint.store.location.is_local:
        root, report = fetch_state(checkpoint, versions)
        own_schema_paths(root)
        yield root, report
        return
    base = Path(checkpoint.store.location.key)
    scratch = cache_root() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="read-", dir=scratch) as folder:
        root = Path(folder)
        needed = files_for_versions(checkpoint, versions)
        pending = list(needed.files)
        seen: set[str] = set()
        total = 0
        while pending:
            rel = pending.pop()
            if rel in seen:
                continue
            seen.add(rel)
            source = base / rel
            if not source.is_file():
                continue
            total += _link_or_copy(str(source), root / rel)
            parent, _, name = rel.rpartition("/")
            for companion in crc_companions(name):
                extra = f"{parent}/{companion}" if parent else companion
                if (base / extra).is_file() and extra not in seen:
                    seen.add(extra)
                    _link_or_copy(str(base / extra), root / extra)
            if classify(name)[0] is FileKind.ZIP:
                pending.extend(_sst_paths(rel, source, needed.shared))
        log.debug("linked %d files (%d bytes) of %s into %s", len(seen), total, checkpoint.uri, root)
        own_schema_paths(root)
        yield root, None
