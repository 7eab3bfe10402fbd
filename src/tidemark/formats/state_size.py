"""How much state each store holds, from file sizes and RocksDB's snapshot metadata; no Spark, no row reads.

RocksDB: the newest snapshot zip at or below the version lists its SST files with their sizes (`sizeBytes`)
and, when Spark counted them (`trackTotalNumberOfRows`), the keys (`numKeys`); the changelogs written after it
are what the state changed since. HDFS-backed: the newest `.snapshot` file and the `.delta` files after it.
One walk of `state/`, then one small read per RocksDB store (its zip's `metadata` entry).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass

from tidemark.config import StateStoreKind
from tidemark.errors import CheckpointError
from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.layout import STATE, FileKind, classify, store_ids
from tidemark.formats.snapshot_zip import snapshot_metadata
from tidemark.storage import join

ROCKSDB = StateStoreKind.ROCKSDB
HDFS = StateStoreKind.HDFS


@dataclass(frozen=True)
class StoreSize:
    """One store folder's state at a version: the bytes of its base snapshot and of the changes after it."""

    operator_id: int
    partition: int
    store: str
    provider: StateStoreKind  # told by the files
    snapshot_version: int | None  # the version whose snapshot was measured (None: no snapshot yet)
    data_bytes: int  # RocksDB: SST bytes the snapshot lists; HDFS: the .snapshot file (both compressed)
    keys: int | None  # RocksDB: the keys the snapshot records, when Spark counted them
    replay_bytes: int  # changelog / delta bytes after the snapshot, up to the version

    @property
    def estimate_bytes(self) -> int:
        """The state's size on disk at the version: the snapshot, or the changes alone when there is none yet."""
        return self.data_bytes if self.snapshot_version is not None else self.replay_bytes


@dataclass(frozen=True)
class StateSize:
    """Every store of a checkpoint at one state version."""

    checkpoint: str
    version: int  # the state version (latest committed batch + 1)
    stores: tuple[StoreSize, ...]

    @property
    def provider(self) -> StateStoreKind | None:
        """The provider the files show, None when no store has files."""
        kinds = {s.provider for s in self.stores}
        return kinds.pop() if len(kinds) == 1 else (ROCKSDB if ROCKSDB in kinds else None)

    @property
    def total_bytes(self) -> int:
        """Summed estimate over all stores."""
        return sum(s.estimate_bytes for s in self.stores)

    @property
    def keys(self) -> int | None:
        """Keys over all stores when every RocksDB snapshot counted them, else None."""
        counts = [s.keys for s in self.stores]
        return sum(c for c in counts if c is not None) if counts and all(c is not None for c in counts) else None

    def per_partition(self) -> dict[int, int]:
        """Estimated bytes per partition, summed over operators and stores."""
        sizes: dict[int, int] = {}
        for s in self.stores:
            sizes[s.partition] = sizes.get(s.partition, 0) + s.estimate_bytes
        return sizes


@dataclass
class _Folder:
    names: dict[int, list[tuple[str, FileKind, int]]]  # version -> (name, kind, size)


def _store_folders(checkpoint: Checkpoint) -> dict[tuple[int, int, str], tuple[str, _Folder]]:
    folders: dict[tuple[int, int, str], tuple[str, _Folder]] = {}
    for listing in checkpoint.store.walk(STATE):
        ids = store_ids(listing.rel)
        if ids is None:
            continue
        versions: dict[int, list[tuple[str, FileKind, int]]] = {}
        for name, size in listing.files:
            kind, version, _ = classify(name)
            if version is not None:
                versions.setdefault(version, []).append((name, kind, size))
        if versions:
            folders[ids] = (listing.rel, _Folder(versions))
    return folders


def _measure(checkpoint: Checkpoint, ids: tuple[int, int, str], rel: str, folder: _Folder, version: int) -> StoreSize:
    op, partition, store = ids
    kinds = {k for files in folder.names.values() for _, k, _ in files}
    provider = ROCKSDB if kinds & {FileKind.ZIP, FileKind.CHANGELOG} else HDFS
    snapshot_kind = FileKind.ZIP if provider == ROCKSDB else FileKind.SNAPSHOT
    replay_kind = FileKind.CHANGELOG if provider == ROCKSDB else FileKind.STATE_DELTA
    snapshots = sorted(
        (v for v, files in folder.names.items() if v <= version and any(k is snapshot_kind for _, k, _ in files)),
        reverse=True,
    )
    base = snapshots[0] if snapshots else None
    replay = sum(
        size
        for v, files in folder.names.items()
        if (base or 0) < v <= version
        for _, kind, size in files
        if kind is replay_kind
    )
    data, keys = 0, None
    if base is not None:
        # Checkpoint format v2 may leave several snapshots of one version (one per attempt): take the largest.
        name, _, size = max((f for f in folder.names[base] if f[1] is snapshot_kind), key=lambda f: f[2])
        if provider == HDFS:
            data = size
        else:
            raw = checkpoint.store.read_bytes(join(rel, name))
            try:
                meta = snapshot_metadata(raw or b"")
            except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError) as exc:
                msg = f"the RocksDB snapshot {join(rel, name)} is unreadable ({exc}): the checkpoint is corrupt"
                raise CheckpointError(msg) from exc
            data = sum(int(f.get("sizeBytes", 0) or 0) for f in meta.get("sstFiles", []) if isinstance(f, dict))
            counted = meta.get("numKeys")
            keys = int(counted) if isinstance(counted, int) and counted > 0 else None
    return StoreSize(op, partition, store, provider, base, data, keys, replay)


def state_size(checkpoint: Checkpoint, version: int | None = None) -> StateSize:
    """The size of every store at a state version (default: what the latest committed batch wrote)."""
    if version is None:
        version = checkpoint.latest_committed_batch() + 1
    stores = [
        _measure(checkpoint, ids, rel, folder, version)
        for ids, (rel, folder) in sorted(_store_folders(checkpoint).items())
    ]
    return StateSize(checkpoint.uri, version, tuple(stores))
