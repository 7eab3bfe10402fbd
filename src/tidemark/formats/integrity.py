"""Every file of a checkpoint read the way Spark reads it on restart, and what is wrong with each: no Spark.

The logs (offsets/, commits/, sources/<i>/, `metadata`) are read whole and parsed as Spark's OffsetSeqLog,
CommitLog, CompactibleFileStreamLog and StreamMetadata parse them; the state files of the version a restart
loads are decoded (formats/state_records.py) or, when large, checked at both ends. The result is typed records
(`FileProblem`) naming the file and the damage; what that breaks and how to fix it is decided by the caller
(doctor/findings.py).
"""

from __future__ import annotations

import json
import logging
import zipfile
from dataclasses import dataclass, field

from tidemark.compat import StrEnum
from tidemark.formats.checkpoint import MAX_LOG_ENTRY_BYTES, Checkpoint
from tidemark.formats.codec import CodecError, check_ends
from tidemark.formats.entries import CommitEntry, OffsetEntry, UnknownVersionError, log_version
from tidemark.formats.layout import (
    COMMITS,
    METADATA,
    OFFSETS,
    SOURCES,
    FileKind,
    classify,
    log_batch,
    log_file_batch,
)
from tidemark.formats.scan import KIND_BITS, CheckpointScan, StoreScan
from tidemark.formats.snapshot_zip import zip_references
from tidemark.formats.state_records import StateFileError, parse_state_file
from tidemark.formats.state_replay import store_folder

log = logging.getLogger(__name__)
JAVA_SERIALIZATION_MAGIC = b"\xac\xed\x00\x05"
# State files up to this size are decoded record by record; larger ones are checked at both ends only.
DECODE_LIMIT = 32 * 1024**2
_ENDS = 64 * 1024


class Damage(StrEnum):
    """What is wrong with one file."""

    EMPTY = "empty"
    FOLDER = "folder"  # a folder where Spark expects a file
    NOT_TEXT = "not-text"
    CORRUPT = "corrupt"  # truncated, garbage or not the format
    UNKNOWN_VERSION = "unknown-version"
    JAVA_SERIALIZED = "java-serialized"  # Spark 2.0's offsets (Java serialization), read by no later Spark
    TOO_LARGE = "too-large"
    MISSING = "missing"  # a file another file names (an SST a RocksDB snapshot lists)


@dataclass(frozen=True)
class FileProblem:
    """One damaged file: where it is (relative to the checkpoint), which batch or version, what is wrong."""

    rel: str
    part: str  # "offsets", "commits", "metadata", "sources/<i>", "state"
    batch: int | None  # the log's batch id, or the state version
    damage: Damage
    detail: str
    operator: int | None = None
    partition: int | None = None
    store: str | None = None


@dataclass
class LogHealth:
    """One log folder (offsets/ or commits/): its batch files, parsed entries and damaged ones."""

    present: bool  # the folder exists
    batches: list[int] = field(default_factory=list)  # every batch id named by a file or a folder
    offsets: dict[int, OffsetEntry] = field(default_factory=dict)
    commits: dict[int, CommitEntry] = field(default_factory=dict)
    problems: list[FileProblem] = field(default_factory=list)


@dataclass
class CheckpointHealth:
    """What reading every log entry, the metadata file, the source logs and the newest state files found."""

    offsets: LogHealth
    commits: LogHealth
    metadata_present: bool
    query_id: str | None
    problems: list[FileProblem] = field(default_factory=list)  # every damaged file, all parts


def _read(checkpoint: Checkpoint, rel: str, part: str, batch: int | None) -> tuple[bytes | None, FileProblem | None]:
    entry = checkpoint.store.stat(rel)
    if entry is None:
        return None, None
    if entry.size > MAX_LOG_ENTRY_BYTES:
        detail = f"it is {entry.size:,} bytes, far larger than any Spark log entry"
        return None, FileProblem(rel, part, batch, Damage.TOO_LARGE, detail)
    data = checkpoint.store.read_bytes(rel)
    if data is None:
        return None, None
    if not data:
        return None, FileProblem(rel, part, batch, Damage.EMPTY, "it is empty (0 bytes)")
    if data.startswith(JAVA_SERIALIZATION_MAGIC):
        detail = "it is Java-serialized, as Spark 2.0 wrote its logs; Spark 2.1 and later read only text logs"
        return None, FileProblem(rel, part, batch, Damage.JAVA_SERIALIZED, detail)
    return data, None


def _text(data: bytes, rel: str, part: str, batch: int | None) -> tuple[str | None, FileProblem | None]:
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, FileProblem(rel, part, batch, Damage.NOT_TEXT, "it is not UTF-8 text (binary garbage)")


def read_log(checkpoint: Checkpoint, folder: str, scan: CheckpointScan | None = None) -> LogHealth:
    """Every entry of offsets/ or commits/, parsed; damaged and misplaced entries as problems (the batch ids
    from the scan's listing when given, saving a listing request on object stores)."""
    if scan is not None:
        is_offsets = folder == OFFSETS
        names = scan.offset_batches if is_offsets else scan.commit_batches
        folders = scan.offset_folders if is_offsets else scan.commit_folders
        present = bool(names or folders) or (folder in scan.folders) or checkpoint.store.exists(folder)
        files = {b: str(b) for b in names}
    else:
        listing = checkpoint.store.list_dir(folder)
        present = listing is not None
        files = {b: name for name, _ in (listing.files if listing else []) if (b := log_batch(name)) is not None}
        folders = [b for name in (listing.dirs if listing else []) if (b := log_batch(name)) is not None]
    health = LogHealth(present=present)
    if not present:
        return health
    health.batches = sorted(set(files) | set(folders))
    for batch in folders:
        detail = "it is a folder, where Spark expects the batch's log file"
        health.problems.append(FileProblem(f"{folder}/{batch}", folder, batch, Damage.FOLDER, detail))
    for batch, name in sorted(files.items()):
        rel = f"{folder}/{name}"
        data, problem = _read(checkpoint, rel, folder, batch)
        text = None
        if data is not None:
            text, problem = _text(data, rel, folder, batch)
        if problem is not None:
            health.problems.append(problem)
            continue
        if text is None:
            continue
        try:
            if folder == OFFSETS:
                health.offsets[batch] = OffsetEntry.parse(batch, text)
            else:
                health.commits[batch] = CommitEntry.parse(batch, text)
        except UnknownVersionError as exc:
            health.problems.append(FileProblem(rel, folder, batch, Damage.UNKNOWN_VERSION, str(exc)))
        except (ValueError, TypeError, KeyError) as exc:
            health.problems.append(FileProblem(rel, folder, batch, Damage.CORRUPT, str(exc)))
    return health


def read_metadata(checkpoint: Checkpoint) -> tuple[bool, str | None, FileProblem | None]:
    """Whether `metadata` exists, the query id it holds, and what is wrong with it."""
    if checkpoint.store.stat(METADATA) is None:
        listing = checkpoint.store.list_dir(METADATA)
        if listing is not None:
            return True, None, FileProblem(METADATA, METADATA, None, Damage.FOLDER, "it is a folder, not a file")
        return False, None, None
    data, problem = _read(checkpoint, METADATA, METADATA, None)
    if problem is not None or data is None:
        return True, None, problem
    text, problem = _text(data, METADATA, METADATA, None)
    if text is None:
        return True, None, problem
    try:
        value = json.loads(text.splitlines()[0] if text.strip() else text)
    except (json.JSONDecodeError, IndexError):
        detail = 'it is not JSON (Spark writes {"id": "<query id>"})'
        return True, None, FileProblem(METADATA, METADATA, None, Damage.CORRUPT, detail)
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        detail = 'it is JSON but not Spark\'s {"id": "<query id>"}'
        return True, None, FileProblem(METADATA, METADATA, None, Damage.CORRUPT, detail)
    return True, str(value["id"]), None


def _source_entry(text: str) -> None:
    """Check one source log entry: a version line (Kafka's starts with a zero byte), then JSON lines."""
    lines = text.lstrip("\x00").splitlines()
    log_version(lines[0] if lines else "", "the entry", 1)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as exc:
            msg = f"line {number} is not JSON ({exc.msg})"
            raise ValueError(msg) from exc


@dataclass(frozen=True)
class SourceEntryProblem:
    """A damaged source log entry, and whether a restart reads it."""

    problem: FileProblem
    read_on_restart: bool


def read_source_logs(checkpoint: Checkpoint) -> list[SourceEntryProblem]:
    """Damaged entries of every sources/<i>/ log. A file source re-reads its newest compact entry and every entry
    after it when the query starts (CompactibleFileStreamLog.allFiles); older entries and other sources' initial
    offsets (sources/<i>/0) are read only when the query starts without offsets."""
    found: list[SourceEntryProblem] = []
    top = checkpoint.store.list_dir(SOURCES)
    for source in sorted(d for d in (top.dirs if top else []) if d.isdigit()):
        folder = f"{SOURCES}/{source}"
        listing = checkpoint.store.list_dir(folder)
        if listing is None:
            continue
        entries = {parsed: name for name, _ in listing.files if (parsed := log_file_batch(name)) is not None}
        compacts = [b for b, compact in entries if compact]
        restart_from = max(compacts, default=0)
        many = len(entries) > 1
        for (batch, _), name in sorted(entries.items()):
            rel = f"{folder}/{name}"
            data, problem = _read(checkpoint, rel, folder, batch)
            if data is not None:
                text, problem = _text(data, rel, folder, batch)
                if text is not None:
                    try:
                        _source_entry(text)
                    except UnknownVersionError as exc:
                        problem = FileProblem(rel, folder, batch, Damage.UNKNOWN_VERSION, str(exc))
                    except ValueError as exc:
                        problem = FileProblem(rel, folder, batch, Damage.CORRUPT, str(exc))
            if problem is not None:
                found.append(SourceEntryProblem(problem, read_on_restart=many and batch >= restart_from))
    return found


def _ends(checkpoint: Checkpoint, rel: str, size: int) -> tuple[bytes, bytes]:
    with checkpoint.store.open_read(rel) as handle:
        head = handle.read(_ENDS)
        if size <= 2 * _ENDS:
            rest = handle.read()
            return head, (head + rest)[-_ENDS:]
        handle.seek(size - _ENDS)
        return head, handle.read(_ENDS)


def _state_problem(rel: str, version: int, ids: tuple[int, int, str], damage: Damage, detail: str) -> FileProblem:
    return FileProblem(rel, "state", version, damage, detail, ids[0], ids[1], ids[2])


def check_state_file(
    checkpoint: Checkpoint, rel: str, version: int, ids: tuple[int, int, str], shared: set[str] | None = None
) -> FileProblem | None:
    """Read one `.delta`/`.snapshot`/`.changelog` (decoded when small) or `.zip` as a restart would; `shared` are
    the names in the store's SSTs/ and logs/ (listed here when not given)."""
    kind = classify(rel.rsplit("/", 1)[-1])[0]
    entry = checkpoint.store.stat(rel)
    if entry is None:
        return None
    if entry.size == 0:
        return _state_problem(rel, version, ids, Damage.EMPTY, "it is empty (0 bytes)")
    if kind is FileKind.ZIP:
        return _check_zip(checkpoint, rel, version, ids, shared)
    try:
        if entry.size <= DECODE_LIMIT:
            parse_state_file(checkpoint.store.read_bytes(rel) or b"", kind)
        else:
            check_ends(*_ends(checkpoint, rel, entry.size))
    except (StateFileError, CodecError) as exc:
        return _state_problem(rel, version, ids, Damage.CORRUPT, str(exc))
    return None


def _check_zip(
    checkpoint: Checkpoint, rel: str, version: int, ids: tuple[int, int, str], shared: set[str] | None = None
) -> FileProblem | None:
    try:
        # Streamed from a seekable handle: a snapshot zip's central directory is at its end.
        with checkpoint.store.open_read(rel) as handle:
            with zipfile.ZipFile(handle) as archive:
                bad = archive.testzip()
            if bad is not None:
                detail = f"it has an entry ({bad}) that fails its CRC check"
                return _state_problem(rel, version, ids, Damage.CORRUPT, detail)
            handle.seek(0)
            references = zip_references(handle)
    except (zipfile.BadZipFile, KeyError, ValueError, IndexError, UnicodeDecodeError, EOFError) as exc:
        detail = f"it is not a readable RocksDB snapshot zip ({exc})"
        return _state_problem(rel, version, ids, Damage.CORRUPT, detail)
    folder = rel.rsplit("/", 1)[0]
    present: set[str] = set(shared or ())
    if shared is None:
        for sub in ("SSTs", "logs"):
            listing = checkpoint.store.list_dir(f"{folder}/{sub}")
            present |= {name for name, _ in (listing.files if listing else [])}
    missing = sorted(references - present)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        detail = f"it lists {len(missing)} file(s) that are not in {folder}/SSTs: {shown}"
        return _state_problem(rel, version, ids, Damage.MISSING, detail)
    return None


def newest_state_files(store: StoreScan, op: int, version: int, unique_id: str | None) -> list[str]:
    """The files of one store at `version` (checkpoint format v2: only the one the commit names)."""
    folder = store_folder(op, store.partition, store.store)
    bits = store.versions.get(version, 0)
    if not bits:
        return []
    names = []
    for number, uid, kind in store.unique_ids:
        if number == version and (unique_id is None or uid == unique_id):
            names.append(f"{number}_{uid}.{kind.value}")
    if names or store.unique_ids:
        return [f"{folder}/{n}" for n in names]
    kinds = [FileKind.STATE_DELTA, FileKind.SNAPSHOT, FileKind.CHANGELOG, FileKind.ZIP]
    return [f"{folder}/{version}.{k.value}" for k in kinds if bits & KIND_BITS[k]]


def check_newest_state(
    checkpoint: Checkpoint,
    scan: CheckpointScan,
    version: int,
    unique_ids: dict[int, list[list[str]]],
) -> list[FileProblem]:
    """Damage in the files of the state version a restart loads first, every operator, partition and store."""
    found = []
    for op_id, op in sorted(scan.operators.items()):
        names = sorted({name for _, name in op.stores})
        for (partition, name), store in sorted(op.stores.items()):
            ids = unique_ids.get(op_id, [])
            per_store = ids[partition] if partition < len(ids) else []
            index = names.index(name)
            unique_id = per_store[index] if index < len(per_store) else None
            for rel in newest_state_files(store, op_id, version, unique_id):
                problem = check_state_file(checkpoint, rel, version, (op_id, partition, name), store.shared)
                if problem is not None:
                    found.append(problem)
    return found


def read_health(checkpoint: Checkpoint, scan: CheckpointScan | None = None) -> CheckpointHealth:
    """The logs and the metadata file, read whole."""
    offsets = read_log(checkpoint, OFFSETS, scan)
    commits = read_log(checkpoint, COMMITS, scan)
    present, query_id, problem = read_metadata(checkpoint)
    health = CheckpointHealth(offsets, commits, present, query_id)
    health.problems = [*offsets.problems, *commits.problems, *([problem] if problem else [])]
    return health
