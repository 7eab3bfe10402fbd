"""One store's rows at one state version, rebuilt from its files the way Spark's providers load it, no Spark.

HDFS-backed: the newest `<s>.snapshot` at or below the version, then every `<v>.delta` after it (from empty when
there is no snapshot); a snapshot wins over a delta of the same version. RocksDB: its snapshots (`<v>.zip`) hold
SST files this module does not read, so a version is rebuilt from changelogs when every changelog from version 1
is still there (checkpoint format v2: the chain the changelog's lineage names), and otherwise counted from the
`numKeys` Spark recorded in the snapshot's metadata when the query tracked it
(`spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows`, Spark's default). Everything else is a
`StateNotReadable` saying why, never a zero.

RocksDB keys carry bytes in front of the UnsafeRow: the column family id (2 bytes, little-endian; stores with
column families, i.e. transformWithState) and an encoding version byte; values carry the version byte.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from io import BytesIO

from tidemark.compat import StrEnum
from tidemark.errors import CheckpointError
from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.codec import Codec
from tidemark.formats.layout import STATE, FileKind, classify
from tidemark.formats.state_files import MAX_ZIP_METADATA_BYTES
from tidemark.formats.state_records import RecordKind, StateFileError, parse_state_file

ROW_CHECKSUM_KEY = "spark.sql.streaming.stateStore.rowChecksum.enabled"


class StateNotReadable(CheckpointError):
    """The files cannot give this store's rows (a RocksDB snapshot, a missing or corrupt file); says why."""


class Provider(StrEnum):
    """The state store provider that wrote a store folder, told by its files."""

    HDFS = "hdfs"
    ROCKSDB = "rocksdb"


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
    provider: Provider | None  # None: no state files at all (version 0)
    method: Method
    rows: int
    size: int | None  # key + value bytes as stored (None when counted from snapshot metadata)
    files: tuple[str, ...]  # the files read, relative to the checkpoint
    codecs: frozenset[Codec] = frozenset()
    key_prefix: int = 0  # bytes before each key's UnsafeRow
    value_prefix: int = 0  # bytes before each value's UnsafeRow
    families: dict[str, int] = field(default_factory=dict)  # rows per column family (RocksDB with families)
    entries: dict[bytes, bytes] | None = None  # key -> value, when asked for and replayed


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
        with zipfile.ZipFile(BytesIO(data)) as archive:
            if archive.getinfo("metadata").file_size > MAX_ZIP_METADATA_BYTES:
                msg = "its metadata entry is too large to be RocksDB's"
                raise ValueError(msg)
            lines = [line for line in archive.read("metadata").decode().splitlines() if line.strip()]
        meta = json.loads(lines[1] if lines[0].startswith("v") else lines[0])
        if not isinstance(meta, dict):
            msg = "its metadata is not a JSON object"
            raise ValueError(msg)
        return meta
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
    def __init__(self, keep: bool, row_checksum: bool) -> None:
        self.keep = keep
        self.row_checksum = row_checksum
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
                if self.row_checksum and kind is FileKind.DELTA:
                    key = key[4:]  # HDFS: a removal's key carries the row checksum in front
                self.sizes.pop(key, None)
                self.entries.pop(key, None)
            elif record is RecordKind.PUT or key not in self.sizes:
                self.sizes[key] = len(value or b"")
                if self.keep:
                    self.entries[key] = value or b""
            elif self.keep:  # a merge onto an existing key: RocksDB appends with its "," delimiter
                self.entries[key] = self.entries[key] + b"," + (value or b"")
                self.sizes[key] = len(self.entries[key])
        return parsed.lineage


def _hdfs_chain(listing: _Listing, version: int, folder: str) -> list[tuple[int, FileKind]]:
    snapshots = [v for v, kinds in listing.files.items() if FileKind.SNAPSHOT in kinds and v <= version]
    base = max(snapshots, default=0)
    chain: list[tuple[int, FileKind]] = [(base, FileKind.SNAPSHOT)] if base else []
    missing = [v for v in range(base + 1, version + 1) if FileKind.DELTA not in listing.files.get(v, {})]
    if missing:
        since = f"snapshot {base}" if base else "version 1 (no snapshot)"
        shown = ", ".join(f"{v}.delta" for v in missing[:5]) + (" ..." if len(missing) > 5 else "")
        msg = f"{folder} cannot rebuild version {version}: it needs every delta after {since}, and {shown} is missing"
        raise StateNotReadable(msg)
    return chain + [(v, FileKind.DELTA) for v in range(base + 1, version + 1)]


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
) -> StoreRows:
    """The rows of one partition's store at a state version (the batch id + 1); StateNotReadable says why not."""
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
    replay = _Replay(keep_entries, row_checksum)
    if kinds & {FileKind.DELTA, FileKind.SNAPSHOT}:
        chain = _hdfs_chain(listing, version, folder)
        files = []
        for number, kind in chain:
            rel = f"{folder}/{listing.name(number, kind)}"
            replay.apply(checkpoint, rel, kind)
            files.append(rel)
        return StoreRows(
            op, partition, store, version, Provider.HDFS, Method.REPLAYED, len(replay.sizes),
            sum(len(k) + v for k, v in replay.sizes.items()), tuple(files), frozenset(replay.codecs),
            key_prefix=4 if row_checksum else 0, value_prefix=4 if row_checksum else 0,
            entries=replay.entries if keep_entries else None,
        )  # fmt: skip
    return _read_rocksdb(checkpoint, folder, listing, (op, partition, store, version), unique_id, replay)


def _changelog_chain(
    listing: _Listing, version: int, unique_id: str | None, checkpoint: Checkpoint, folder: str
) -> list[str] | None:
    """The changelog files, version 1 first, that rebuild `version` from empty; None when one is gone."""
    name = listing.name(version, FileKind.CHANGELOG, unique_id)
    if name is None:
        return None
    if unique_id is None and classify(name)[2] is None:
        names = [listing.name(v, FileKind.CHANGELOG) for v in range(1, version + 1)]
        return None if any(n is None for n in names) else [f"{folder}/{n}" for n in names if n]
    # Checkpoint format v2: the changelog names its predecessors (back to the newest snapshot) in its lineage.
    replay = _Replay(keep=False, row_checksum=False)
    lineage = replay.apply(checkpoint, f"{folder}/{name}", FileKind.CHANGELOG)
    chain = [*sorted(lineage), (version, classify(name)[2] or "")]
    if not chain or chain[0][0] != 1:
        return None
    names = [listing.name(v, FileKind.CHANGELOG, u) for v, u in chain]
    return None if any(n is None for n in names) else [f"{folder}/{n}" for n in names if n]


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
            op, partition, store, 0, Provider.ROCKSDB, Method.REPLAYED, 0, 0, (), entries={} if replay.keep else None
        )
    chain = _changelog_chain(listing, version, unique_id, checkpoint, folder)
    if chain is not None:
        for rel in chain:
            replay.apply(checkpoint, rel, FileKind.CHANGELOG)
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
        return StoreRows(
            op, partition, store, version, Provider.ROCKSDB, Method.REPLAYED, counted,
            sum(len(k) + v for k, v in replay.sizes.items()), tuple(chain), frozenset(replay.codecs),
            key_prefix=3 if with_families else 1, value_prefix=1, families=per_family,
            entries=replay.entries if replay.keep else None,
        )  # fmt: skip
    snapshot = listing.name(version, FileKind.ZIP, unique_id)
    if snapshot is not None and not replay.keep:
        rel = f"{folder}/{snapshot}"
        meta = _zip_metadata(checkpoint, rel)
        keys = meta.get("numKeys")
        if isinstance(keys, int) and keys >= 0:
            return StoreRows(op, partition, store, version, Provider.ROCKSDB, Method.SNAPSHOT_COUNT, keys, None, (rel,))
        msg = (
            f"{rel} records no row count (the query ran with "
            "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false) and its rows are in RocksDB SST "
            "files, which only Spark's state reader (Spark 4.0+) reads"
        )
        raise StateNotReadable(msg)
    held = sorted(listing.files)
    msg = (
        f"{folder} holds version {version} as a RocksDB snapshot plus changelogs (versions {held[0]}..{held[-1]} "
        "on disk): its rows are in the snapshot's SST files, which only Spark's state reader (Spark 4.0+) reads"
    )
    raise StateNotReadable(msg)
