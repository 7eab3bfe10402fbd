"""Copy a checkpoint without its state store data, rewriting what records the partition count.

Everything but the stores' data files is copied: the query id, the offset and commit logs (each offset entry's
recorded conf rewritten), the source logs, the operator metadata (numPartitions rewritten, transformWithState
schema paths pointed at the copy), the schema files, and tidemark's own folder except the run lock. Checksum
companions of rewritten files are left behind, so Hadoop does not check the new content against them. The same
rewrite of operator metadata points a local copy's transformWithState schema paths at itself (own_schema_paths).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidemark.errors import CheckpointError
from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.entries import (
    hadoop_uri,
    relocate_schema_paths,
    rewrite_commit_unique_ids,
    rewrite_offset_conf,
    rewrite_operator_metadata,
)
from tidemark.formats.layout import COMMITS, LOCK_FILE, OFFSETS, STATE, crc_companions, schema_folder
from tidemark.formats.state_schema import with_schema_ids
from tidemark.storage import Storage, open_storage

_METADATA = "_metadata"


@dataclass(frozen=True)
class CloneResult:
    """What a clone copied and rewrote."""

    files: int
    bytes: int
    rewritten: tuple[str, ...]


def is_store_data(rel: str) -> bool:
    """True for files of a partition's state store (not its schema metadata, which partition 0 keeps)."""
    parts = rel.split("/")
    if len(parts) < 4 or parts[0] != STATE or not parts[2].isdigit():
        return False
    if parts[2] != "0":
        return True
    return not (parts[3] == _METADATA or (len(parts) > 5 and parts[4] == _METADATA))


def _is_operator_metadata(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) >= 4 and parts[0] == STATE and parts[2] == _METADATA and not parts[-1].endswith(".crc")


def _is_offset_entry(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == OFFSETS and parts[1].isdigit()


def clone_whole(source: Checkpoint, target: Storage) -> CloneResult:
    """Copy every file of source into target (an empty folder) as it is, but tidemark's run lock."""
    files = 0
    size = 0
    for entry in source.store.list_files(""):
        if entry.rel == LOCK_FILE:
            continue
        data = source.store.read_bytes(entry.rel)
        if data is None:
            msg = f"{source.store.uri(entry.rel)} disappeared while copying the checkpoint: is the query running?"
            raise CheckpointError(msg)
        target.write_atomic(entry.rel, data)
        files += 1
        size += len(data)
    return CloneResult(files, size, ())


def clone_without_state(
    source: Checkpoint,
    target: Storage,
    conf_updates: dict[str, str],
    partitions: int,
) -> CloneResult:
    """Copy source into target (an empty folder) as described above; the state stores are written separately."""
    entries = [e for e in source.store.list_files("") if not is_store_data(e.rel) and e.rel != LOCK_FILE]
    rewrite = {e.rel for e in entries if _is_offset_entry(e.rel) or _is_operator_metadata(e.rel)}
    skipped: set[str] = set()
    for rel in rewrite:
        folder, name = rel.rsplit("/", 1)
        skipped.update(f"{folder}/{companion}" for companion in crc_companions(name))
    files = 0
    size = 0
    for entry in entries:
        if entry.rel in skipped:
            continue
        data = source.store.read_bytes(entry.rel)
        if data is None:
            msg = f"{source.store.uri(entry.rel)} disappeared while copying the checkpoint: is the query running?"
            raise CheckpointError(msg)
        if entry.rel in rewrite:
            data = _rewritten(entry.rel, data, target, conf_updates, partitions)
        target.write_atomic(entry.rel, data)
        files += 1
        size += len(data)
    return CloneResult(files, size, tuple(sorted(rewrite)))


def _rewritten(rel: str, data: bytes, target: Storage, conf_updates: dict[str, str], partitions: int) -> bytes:
    text = data.decode("utf-8")
    try:
        if _is_offset_entry(rel):
            return rewrite_offset_conf(text, conf_updates).encode("utf-8")
        return rewrite_operator_metadata(text, partitions, schema_root(target, rel.split("/")[1])).encode("utf-8")
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"cannot rewrite {rel} of the checkpoint ({exc}): it may be corrupt"
        raise CheckpointError(msg) from exc


def record_unique_ids(target: Storage, batch: int, unique_ids: dict[int, list[list[str]]]) -> None:
    """Name the rewritten state files in a clone's commits/<batch> (checkpoint format v2): Spark loads each
    partition's next version by the ids of the latest commit, so they must be the new partitions' ids."""
    rel = f"{COMMITS}/{batch}"
    data = target.read_bytes(rel)
    if data is None:
        msg = f"{target.uri(rel)} is missing from the new checkpoint"
        raise CheckpointError(msg)
    try:
        text = rewrite_commit_unique_ids(data.decode("utf-8"), unique_ids)
    except (ValueError, UnicodeDecodeError) as exc:
        msg = f"cannot rewrite {rel} of the checkpoint ({exc}): it may be corrupt"
        raise CheckpointError(msg) from exc
    target.write_atomic(rel, text.encode("utf-8"))
    for companion in crc_companions(str(batch)):
        if target.exists(f"{COMMITS}/{companion}"):
            target.delete(f"{COMMITS}/{companion}")


def schema_root(store: Storage, operator: str) -> str:
    """Where an operator's schema files live in store, as Spark records them (file: URIs for local paths)."""
    return hadoop_uri(store.uri(schema_folder(operator)))


def repoint_schema_paths(store: Storage, partitions: int, final_root: Storage) -> list[str]:
    """Point the transformWithState schema paths of every operator metadata file in store at final_root."""

    def rewrite(rel: str, data: bytes) -> bytes:
        root = schema_root(final_root, rel.split("/")[1])
        return rewrite_operator_metadata(data.decode("utf-8"), partitions, root).encode("utf-8")

    return _rewrite_metadata_files(store, rewrite)


def own_schema_paths(root: Path) -> list[str]:
    """Point transformWithState's operator metadata in a local copy (a private copy, a fetch into the cache) at the
    copy's own schema files.

    Spark 4 records each store's schema files by absolute path (`stateSchemaFilePaths`), and its state reader
    follows them: a checkpoint moved, copied or fetched from the cloud would send the reader to where it was
    written (gone, or remote). The files are replaced by a rename, never written through, so a hard-linked
    original stays as it was. A file that is not Spark's metadata is left for the reader to report, as it would on
    the original.
    """
    copy_root = hadoop_uri(str(root))

    def rewrite(rel: str, data: bytes) -> bytes:
        if _is_schema_file(rel):
            # Spark's pre-release 4.0.0 layout, in the layout the installed Spark's reader reads.
            return with_schema_ids(data) or data
        try:
            return relocate_schema_paths(data.decode("utf-8"), copy_root).encode("utf-8")
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError):
            return data

    wanted = lambda rel: _is_operator_metadata(rel) or _is_schema_file(rel)  # noqa: E731
    return _rewrite_state_files(open_storage(str(root)), wanted, rewrite)


def _is_schema_file(rel: str) -> bool:
    return "/_stateSchema/" in rel and not rel.rsplit("/", 1)[-1].startswith(".")


def _rewrite_metadata_files(store: Storage, rewrite: Callable[[str, bytes], bytes]) -> list[str]:
    """Rewrite every operator metadata file of store (_rewrite_state_files)."""
    return _rewrite_state_files(store, _is_operator_metadata, rewrite)


def _rewrite_state_files(
    store: Storage, wanted: Callable[[str], bool], rewrite: Callable[[str, bytes], bytes]
) -> list[str]:
    """Rewrite the wanted files under state/ (write_atomic: a new file, never through a link); a changed file loses
    its checksum companions, which Hadoop's local reader would check the new bytes against."""
    changed = []
    for entry in list(store.list_files(STATE)):
        if not wanted(entry.rel):
            continue
        data = store.read_bytes(entry.rel)
        if data is None:
            continue
        new = rewrite(entry.rel, data)
        if new != data:
            store.write_atomic(entry.rel, new)
            folder, name = entry.rel.rsplit("/", 1)
            for companion in crc_companions(name):
                if store.exists(f"{folder}/{companion}"):
                    store.delete(f"{folder}/{companion}")
            changed.append(entry.rel)
    return changed
