"""One store's rows at one state version, rebuilt from its files the way Spark's providers load it, no Spark.

HDFS-backed: the newest `<s>.snapshot` at or below the version, then every `<v>.delta` after it (from empty when
there is no snapshot); a snapshot wins over a delta of the same version. RocksDB: every changelog from version 1
when they are all still there; else the newest snapshot (`<v>.zip`, whose metadata names the SST files holding
its rows: formats/rocksdb_sst.py reads them) and every changelog after it (checkpoint format v2: the chain the
changelog's lineage names). Where the SSTs use something that reader does not know, a version that is itself a
snapshot is counted from the `numKeys` Spark recorded in it when the query tracked it. Everything else is a
`StateNotReadable` saying why, never a zero.

RocksDB keys carry bytes in front of the UnsafeRow: the column family id (2 bytes, little-endian; stores with
column families, i.e. transformWithState) and an encoding version byte; values carry the version byte.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from io import BytesIO

from tidemark.compat import StrEnum
from tidemark.config import StateStoreKind  # the provider that wrote a store folder, told by its files
from tidemark.errors import CheckpointError
from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.codec import Codec
from tidemark.formats.layout import STATE, FileKind, classify
from tidemark.formats.rocksdb_sst import SstError, merge_snapshot
from tidemark.formats.snapshot_zip import snapshot_metadata
from tidemark.formats.state_records import RecordKind, StateFileError, parse_state_file

ROW_CHECKSUM_KEY = "spark.sql.streaming.stateStore.rowChecksum.enabled"


class StateNotReadable(CheckpointError):
    """The files cannot give this store's rows (a RocksDB snapshot, a missing or corrupt file); says why."""


class Method(StrEnum):
    """How the rows were obtained."""

    REPLAYED = "replayed"  # every record of the snapshot/delta/changelog chain applied in order
    SNAPSHOT_COUNT = "snapshot-count"  # RocksDB: the numKeys Spark recorded in the snapshot's metadata


@dataclass(frozen=True)
class ColumnFamilies:
    """A RocksDB store's column families: id -> name, and which are Spark's internal ones."""

    names: dict[int, str]
    internal: frozenset[str]


@dataclass
class StoreRows:
    """One partition's store at one version."""

    operator: int
    partition: int
    store: str
    version: int
    provider: StateStoreKind | None  # None: no state files at all (version 0)
    method: Method
    rows: int
    size: int | None  # key + value bytes as stored (None when counted from snapshot metadata)
    files: tuple[str, ...]  # the files read, relative to the checkpoint
    codecs: frozenset[Codec] = frozenset()
    key_prefix: int = 0  # bytes before each key's UnsafeRow
    value_prefix: int = 0  # bytes before each value's UnsafeRow
    families: dict[str, int] = field(default_factory=dict)  # rows per column family (RocksDB with families)
    entries: dict[bytes, bytes] | None = None  # key -> value, when asked for and replayed
    family_names: dict[int, str] = field(default_factory=dict)  # column family id (a key's first 2 bytes) -> name

    def family_of(self, key: bytes) -> str:
        """The column family an entry's key belongs to (RocksDB with families; "#<id>" when unnamed)."""
        cf = int.from_bytes(key[:2], "little")
        return self.family_names.get(cf, f"#{cf}")


def store_folder(op: int, partition: int, store: str) -> str:
    """state/<op>/<partition>[/<store>] (the single store `default` has no folder of its own)."""
    base = f"{STATE}/{op}/{partition}"
    return base if store == "default" else f"{base}/{store}"


@dataclass
class _Listing:
    # version -> kind -> {unique id or None: file name}
    files: dict[int, dict[FileKind, dict[str | None, str]]] = field(default_factory=dict)

    def name(self, version: int, kind: FileKind, unique_id: str | None = None) -> str | None:
        found = self.files.get(version, {}).get(kind, {})
        if unique_id is not None:
            return found.get(unique_id)
        if None in found:
            return found[None]
        return next(iter(found.values())) if len(found) == 1 else None

    def kinds(self) -> set[FileKind]:
        return {k for by_kind in self.files.values() for k in by_kind}


def _listing(checkpoint: Checkpoint, folder: str) -> _Listing:
    listing = checkpoint.store.list_dir(folder)
    result = _Listing()
    for name, _ in listing.files if listing else []:
        kind, version, unique_id = classify(name)
        if version is None or name.startswith("."):
            continue
        result.files.setdefault(version, {}).setdefault(kind, {})[unique_id] = name
    return result


def _zip_metadata(checkpoint: Checkpoint, rel: str) -> dict[str, object]:
    data = checkpoint.store.read_bytes(rel)
    if data is None:
        msg = f"{rel} is gone"
        raise StateNotReadable(msg)
    try:
        return snapshot_metadata(data)
    except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError) as exc:
        msg = f"{rel} is not a readable RocksDB snapshot ({exc})"
        raise StateNotReadable(msg) from exc


def column_families(checkpoint: Checkpoint, folder: str, listing: _Listing) -> ColumnFamilies | None:
    """The column family mapping recorded in the store's newest snapshot zip (Spark 4.0+), or None."""
    for version in sorted(listing.files, reverse=True):
        for name in listing.files[version].get(FileKind.ZIP, {}).values():
            meta = _zip_metadata(checkpoint, f"{folder}/{name}")
            mapping = meta.get("columnFamilyMapping")
            if not isinstance(mapping, dict) or not mapping:
                return None
            kinds = meta.get("columnFamilyTypeMap")
            internal = {str(k) for k, v in (kinds.items() if isinstance(kinds, dict) else []) if v}
            internal |= {str(k) for k in mapping if str(k).startswith("$")}
            return ColumnFamilies({int(v): str(k) for k, v in mapping.items()}, frozenset(internal))
    return None


class _Replay:
    def __init__(self, keep: bool, row_checksum: bool, delimiter: bytes = b",") -> None:
        self.keep = keep
        self.row_checksum = row_checksum
        self.delimiter = delimiter  # what RocksDB's merge operator puts between two merged values
        self.entries: dict[bytes, bytes] = {}
        self.sizes: dict[bytes, int] = {}
        self.codecs: set[Codec] = set()
        self.format_versions: set[int] = set()

    def apply(self, checkpoint: Checkpoint, rel: str, kind: FileKind) -> tuple[tuple[int, str], ...]:
        data = checkpoint.store.read_bytes(rel)
        if data is None:
            msg = f"{rel} is gone"
            raise StateNotReadable(msg)
        try:
            parsed = parse_state_file(data, kind)
        except StateFileError as exc:
            msg = f"{rel} is not a readable state file: {exc}"
            raise StateNotReadable(msg) from exc
        self.codecs.add(parsed.codec)
        self.format_versions.add(parsed.format_version)
        for record, key, value in parsed.records:
            if record is RecordKind.DELETE:
                if self.row_checksum and kind is FileKind.STATE_DELTA:
                    key = key[4:]  # HDFS: a removal's key carries the row checksum in front
                self.sizes.pop(key, None)
                self.entries.pop(key, None)
            elif record is RecordKind.PUT or key not in self.sizes:
                self.sizes[key] = len(value or b"")
                if self.keep:
                    self.entries[key] = value or b""
            elif self.keep:  # a merge onto an existing key: RocksDB appends (after "," in merge operator v1)
                self.entries[key] = self.entries[key] + self.delimiter + (value or b"")
                self.sizes[key] = len(self.entries[key])
        return parsed.lineage


def _hdfs_chain(listing: _Listing, version: int, folder: str) -> list[tuple[int, FileKind]]:
    snapshots = [v for v, kinds in listing.files.items() if FileKind.SNAPSHOT in kinds and v <= version]
    base = max(snapshots, default=0)
    chain: list[tuple[int, FileKind]] = [(base, FileKind.SNAPSHOT)] if base else []
    missing = [v for v in range(base + 1, version + 1) if FileKind.STATE_DELTA not in listing.files.get(v, {})]
    if missing:
        since = f"snapshot {base}" if base else "version 1 (no snapshot)"
        shown = ", ".join(f"{v}.delta" for v in missing[:5]) + (" ..." if len(missing) > 5 else "")
        msg = f"{folder} cannot rebuild version {version}: it needs every delta after {since}, and {shown} is missing"
        raise StateNotReadable(msg)
    return chain + [(v, FileKind.STATE_DELTA) for v in range(base + 1, version + 1)]


def read_store(
    checkpoint: Checkpoint,
    op: int,
    partition: int,
    store: str,
    version: int,
    *,
    unique_id: str | None = None,
    keep_entries: bool = False,
    row_checksum: bool = False,
    merge_delimiter: bytes = b",",
) -> StoreRows:
    """The rows of one partition's store at a state version (the batch id + 1); StateNotReadable says why not.

    merge_delimiter: what RocksDB's merge operator puts between merged values (formats.merge_delimiter)."""
    folder = store_folder(op, partition, store)
    listing = _listing(checkpoint, folder)
    kinds = listing.kinds()
    base = StoreRows(
        op, partition, store, version, None, Method.REPLAYED, 0, 0, (), entries={} if keep_entries else None
    )
    if not kinds:
        if version == 0:
            return base
        msg = (
            f"{folder} holds no state files (the partition's folder is gone or empty), so version {version} cannot load"
        )
        raise StateNotReadable(msg)
    replay = _Replay(keep_entries, row_checksum, merge_delimiter)
    if kinds & {FileKind.STATE_DELTA, FileKind.SNAPSHOT}:
        chain = _hdfs_chain(listing, version, folder)
        files = []
        for number, kind in chain:
            rel = f"{folder}/{listing.name(number, kind)}"
            replay.apply(checkpoint, rel, kind)
            files.append(rel)
        return StoreRows(
            op, partition, store, version, StateStoreKind.HDFS, Method.REPLAYED, len(replay.sizes),
            sum(len(k) + v for k, v in replay.sizes.items()), tuple(files), frozenset(replay.codecs),
            key_prefix=4 if row_checksum else 0, value_prefix=4 if row_checksum else 0,
            entries=replay.entries if keep_entries else None,
        )  # fmt: skip
    return _read_rocksdb(checkpoint, folder, listing, (op, partition, store, version), unique_id, replay)


def _chain(
    listing: _Listing, version: int, unique_id: str | None, checkpoint: Checkpoint, folder: str
) -> tuple[str | None, list[str]] | None:
    """The snapshot zip to start from (None: from empty) and the changelogs after it, in order, that rebuild
    `version` as Spark loads it; None when a file of that chain is gone.

    Format v1 names: the newest snapshot at or below the version and every changelog after it, or every changelog
    from version 1. Format v2 (`<v>_<uuid>`): the chain the version's changelog names in its lineage (its first
    item is the snapshot), or the version's own snapshot.
    """
    name = listing.name(version, FileKind.CHANGELOG, unique_id)
    own_zip = listing.name(version, FileKind.ZIP, unique_id)
    if name is not None and (unique_id is not None or classify(name)[2] is not None):
        replay = _Replay(keep=False, row_checksum=False)
        lineage = sorted(replay.apply(checkpoint, f"{folder}/{name}", FileKind.CHANGELOG))
        chain = [*lineage, (version, classify(name)[2] or "")]
        base = listing.name(chain[0][0], FileKind.ZIP, chain[0][1]) if chain[0][0] > 1 or lineage else None
        if base is not None:
            chain = chain[1:]
        elif chain[0][0] != 1:
            return None
        names = [listing.name(v, FileKind.CHANGELOG, u) for v, u in chain]
        if any(n is None for n in names):
            return None
        return (f"{folder}/{base}" if base else None), [f"{folder}/{n}" for n in names if n]
    if own_zip is not None and unique_id is not None:
        return f"{folder}/{own_zip}", []
    changelogs = {v: listing.name(v, FileKind.CHANGELOG) for v in range(1, version + 1)}
    if all(changelogs.values()):
        return None, [f"{folder}/{changelogs[v]}" for v in range(1, version + 1)]
    snapshots = [v for v, kinds in listing.files.items() if FileKind.ZIP in kinds and v <= version]
    if not snapshots:
        return None
    base_version = max(snapshots)
    after = [changelogs.get(v) for v in range(base_version + 1, version + 1)]
    if any(n is None for n in after):
        return None
    return f"{folder}/{listing.name(base_version, FileKind.ZIP)}", [f"{folder}/{n}" for n in after if n]


def _snapshot_entries(checkpoint: Checkpoint, folder: str, zip_rel: str, delimiter: bytes) -> dict[bytes, bytes]:
    """The rows of a RocksDB snapshot: its zip's metadata names the SST files (in SSTs/) that hold them."""
    data = checkpoint.store.read_bytes(zip_rel)
    if data is None:
        msg = f"{zip_rel} is gone"
        raise StateNotReadable(msg)
    meta = _zip_metadata(checkpoint, zip_rel)
    with zipfile.ZipFile(BytesIO(data)) as archive:
        if any(i.filename.endswith(".log") and i.file_size > 0 for i in archive.infolist()):
            msg = f"{zip_rel} holds a non-empty RocksDB write-ahead log, which tidemark does not read"
            raise StateNotReadable(msg)
    logs = meta.get("logFiles")
    if isinstance(logs, list) and any(isinstance(f, dict) and f.get("sizeBytes") for f in logs):
        msg = f"{zip_rel} names RocksDB write-ahead logs, which tidemark does not read"
        raise StateNotReadable(msg)
    files = []
    listed = meta.get("sstFiles")
    for entry in listed if isinstance(listed, list) else []:
        rel = f"{folder}/SSTs/{entry['dfsSstFileName']}" if isinstance(entry, dict) else ""
        sst = checkpoint.store.read_bytes(rel) if rel else None
        if sst is None:
            msg = f"{zip_rel} lists {rel or entry}, which is gone"
            raise StateNotReadable(msg)
        files.append(sst)
    try:
        return merge_snapshot(files, delimiter)
    except SstError as exc:
        msg = f"the SST files of {zip_rel} are not readable here: {exc}"
        raise StateNotReadable(msg) from exc


def _read_rocksdb(
    checkpoint: Checkpoint,
    folder: str,
    listing: _Listing,
    ids: tuple[int, int, str, int],
    unique_id: str | None,
    replay: _Replay,
) -> StoreRows:
    op, partition, store, version = ids
    families = column_families(checkpoint, folder, listing)
    if version == 0:
        return StoreRows(
            op,
            partition,
            store,
            0,
            StateStoreKind.ROCKSDB,
            Method.REPLAYED,
            0,
            0,
            (),
            entries={} if replay.keep else None,
        )
    chain = _chain(listing, version, unique_id, checkpoint, folder)
    if chain is None:
        held = sorted(listing.files)
        msg = (
            f"{folder} cannot rebuild version {version}: a snapshot or changelog of its chain is gone (versions "
            f"{held[0]}..{held[-1]} on disk)"
        )
        raise StateNotReadable(msg)
    base, changelogs = chain
    try:
        if base is not None:
            entries = _snapshot_entries(checkpoint, folder, base, replay.delimiter)
            replay.sizes = {k: len(v) for k, v in entries.items()}
            if replay.keep:
                replay.entries = entries
        for rel in changelogs:
            replay.apply(checkpoint, rel, FileKind.CHANGELOG)
    except StateNotReadable:
        own = listing.name(version, FileKind.ZIP, unique_id)
        if base is None or base != f"{folder}/{own}" or replay.keep:
            raise
        # The version's own snapshot: Spark recorded its row count when the query tracked it.
        keys = _zip_metadata(checkpoint, base).get("numKeys")
        if isinstance(keys, int) and keys >= 0:
            return StoreRows(
                op, partition, store, version, StateStoreKind.ROCKSDB, Method.SNAPSHOT_COUNT, keys, None, (base,)
            )
        raise
    with_families = families is not None or bool(replay.format_versions & {2, 4})
    per_family: dict[str, int] = {}
    counted = 0
    for key in replay.sizes:
        if not with_families:
            counted += 1
            continue
        cf = int.from_bytes(key[:2], "little")
        name = families.names.get(cf, f"#{cf}") if families else f"#{cf}"
        per_family[name] = per_family.get(name, 0) + 1
        if families is None or name not in families.internal:
            counted += 1
    files = tuple([base] if base else []) + tuple(changelogs)
    return StoreRows(
        op, partition, store, version, StateStoreKind.ROCKSDB, Method.REPLAYED, counted,
        sum(len(k) + v for k, v in replay.sizes.items()), files, frozenset(replay.codecs),
        key_prefix=3 if with_families else 1, value_prefix=1, families=per_family,
        entries=replay.entries if replay.keep else None, family_names=dict(families.names) if families else {},
    )  # fmt: skip
