"""The file sink's `_spark_metadata` log and data files, on any store: what is committed, and how big the log is."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlparse

from tidemark.compat import UTC
from tidemark.errors import CheckpointError
from tidemark.formats import Checkpoint, RecoveryMarker, crc_companions, log_file_batch
from tidemark.storage import Backend, FileEntry, Location, Storage, open_storage, parse_location

SINK_LOG_DIR = "_spark_metadata"  # Spark's file sink log, below the output folder
COMPACT = ".compact"
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class SinkLog:
    """What the sink's metadata log says is committed: the live files, as Spark readers see them."""

    batches: tuple[int, ...]  # every batch id that has a log file (plain or compact)
    latest_batch: int | None
    base_compact: int | None  # the compact file the live list starts from, if any
    files: dict[str, str]  # file path below the sink folder -> the exact JSON line Spark wrote for it
    outside: tuple[str, ...] = ()  # entries naming a path outside the sink folder (a moved or copied sink)

    @property
    def exists(self) -> bool:
        """True when the log holds at least one batch (a new query would skip its batch ids)."""
        return bool(self.batches)


def entry_rel(sink: Location, path: str) -> str | None:
    """The path below the sink folder of a log entry's URI, or None when it lies elsewhere.

    Spark URI-encodes the already Hive-escaped path (`windowStart=2024-01-01 00%3A00%3A00` becomes
    `...%2000%253A00%253A00`): one unquote gives the name on storage.
    """
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        target = parse_location(unquote(parsed.path))
    else:
        target = parse_location(f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}")
    return target.relative_to(sink)


def log_names(store: Storage) -> dict[int, str]:
    """Batch id -> file name of every log file in `<sink>/_spark_metadata`."""
    listing = store.list_dir(SINK_LOG_DIR)
    found: dict[int, str] = {}
    for name, _ in listing.files if listing else []:
        parsed = log_file_batch(name)
        if parsed is not None:
            found[parsed[0]] = name
    return found


def _read_entries(store: Storage, name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(path, raw line, parsed entry) of every entry of one log file."""
    rel = f"{SINK_LOG_DIR}/{name}"
    data = store.read_bytes(rel)
    if data is None:
        msg = f"the sink log file {store.uri(rel)} disappeared while it was read: rerun the command"
        raise CheckpointError(msg)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        msg = f"sink log file {store.uri(rel)} is not UTF-8 text: it is corrupt; run `tidemark recover`"
        raise CheckpointError(msg) from exc
    if not lines or not lines[0].startswith("v"):
        msg = f"sink log file {store.uri(rel)} is empty or has no version line: it is corrupt; run `tidemark recover`"
        raise CheckpointError(msg)
    entries = []
    for line in lines[1:]:
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            path = str(entry["path"])
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"sink log file {store.uri(rel)} has a line that is not an entry: corrupt; run `tidemark recover`"
            raise CheckpointError(msg) from exc
        entries.append((path, line, entry))
    return entries


def read_log(
    store: Storage, up_to: int | None = None, empty: Callable[[list[int]], Collection[int]] | None = None
) -> SinkLog:
    """The live file list of the log at batch `up_to` (default: the newest), as Spark's allFiles builds it.

    empty: given the batches the log has no file for, those the checkpoint proves wrote nothing (Spark's offline
    repartition batch, which the sink log never gets; `Checkpoint.repartition_batches`): each is read as an empty
    batch, where Spark's readers fail (`checkpoint inspect --sink`: SINK_LOG_GAP). Any other missing file is an
    incomplete log.
    """
    names = log_names(store)
    usable = sorted(b for b in names if up_to is None or b <= up_to)
    if not usable:
        return SinkLog(tuple(sorted(names)), None, None, {})
    latest = usable[-1]
    compacts = [b for b in usable if names[b].endswith(COMPACT)]
    base = compacts[-1] if compacts else None
    start = base if base is not None else 0
    files: dict[str, str] = {}
    outside: dict[str, str] = {}
    absent = [b for b in range(start, latest + 1) if b not in names]
    skipped = set(empty(absent)) if absent and empty is not None else set()
    for batch in range(start, latest + 1):
        if batch in skipped:
            continue
        if batch not in names:
            msg = (
                f"{store.uri(SINK_LOG_DIR)} has no file for batch {batch} (needed to list batch {latest}): "
                "the sink log is incomplete (if the checkpoint is gone and that batch was Spark's offline state "
                "repartition, which writes no output, the single line 'v1' in that file closes the gap)"
            )
            raise CheckpointError(msg)
        for path, line, entry in _read_entries(store, names[batch]):
            rel = entry_rel(store.location, path)
            target = files if rel is not None else outside
            key = rel if rel is not None else path
            if entry.get("action") == "delete":
                target.pop(key, None)
            else:
                target[key] = line
    return SinkLog(tuple(sorted(names)), latest, base, files, tuple(sorted(outside)))


def skipped_batches(logged: Collection[int], latest_compact: int | None, empty: Collection[int]) -> list[int]:
    """The batches of `empty` (committed with no output: Spark's offline repartition batch) the log skips over: no
    file of their own while a later batch has one, and no compaction after them (a compaction that read past a batch
    proves the log was whole then; its older files may since be cleaned up). Spark's readers of the sink fail on
    each (`_spark_metadata/<b> doesn't exist`); the file of an empty batch is the single line `v1`."""
    after = -1 if latest_compact is None else latest_compact
    return sorted(b for b in empty if b not in logged and b > after and any(later > b for later in logged))


def batch_entries(store: Storage, batch: int) -> list[str] | None:
    """The paths (below the sink) the log file of one batch adds, or None when that batch has no plain file."""
    names = log_names(store)
    name = names.get(batch)
    if name is None or name.endswith(COMPACT):
        return None
    found = []
    for path, _line, entry in _read_entries(store, name):
        rel = entry_rel(store.location, path)
        if rel is not None and entry.get("action") != "delete":
            found.append(rel)
    return found


def log_files_after(store: Storage, batch: int) -> list[str] | None:
    """The sink log files (with their checksums) of the batches after `batch`; None when the sink has no log."""
    names = log_names(store)
    if not names:
        return None
    listing = store.list_dir(SINK_LOG_DIR)
    present = {name for name, _ in (listing.files if listing else [])}
    return [
        f"{SINK_LOG_DIR}/{c}"
        for b, name in sorted(names.items())
        if b > batch
        for c in (name, *crc_companions(name))
        if c in present
    ]


def is_data_path(rel: str) -> bool:
    """True for files a Parquet reader reads: no part of the path starts with '_' or '.', no checksums."""
    parts = rel.split("/")
    return not any(p.startswith(("_", ".")) for p in parts) and not rel.endswith(".crc")


def data_files(store: Storage) -> list[FileEntry]:
    """Every data file under the sink folder, name order (one flat listing on object stores)."""
    return sorted((e for e in store.list_files() if is_data_path(e.rel)), key=lambda e: e.rel)


def companions(rel: str, present: set[str]) -> list[str]:
    """The file and the checksum files Hadoop and Spark wrote beside it, those that are present."""
    folder, _, name = rel.rpartition("/")
    candidates = [name, *crc_companions(name)]
    return [f"{folder}/{n}" if folder else n for n in candidates if (f"{folder}/{n}" if folder else n) in present]


def partition_value(rel: str, column: str) -> str | None:
    """The raw (unescaped) value of a Hive partition folder `column=value` on the way to rel."""
    for part in rel.split("/")[:-1]:
        name, sep, value = part.partition("=")
        if sep and name == column:
            return unquote(value)
    return None


def partition_start(rel: str, column: str = "windowStart") -> datetime | None:
    """The window start of a file in a `windowStart=...` partition (UTC), or None."""
    value = partition_value(rel, column)
    if value is None or value == "__HIVE_DEFAULT_PARTITION__":
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _count_lines(store: Storage, rel: str) -> int:
    newlines = 0
    last = b"\n"
    # Streamed: a compact file can be larger than the memory we allow ourselves.
    with store.open_read(rel) as handle:
        while chunk := handle.read(_CHUNK):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    return newlines + (0 if last == b"\n" else 1)


@dataclass(frozen=True)
class LogFile:
    """One file of the sink log: its batch, whether it is a compact file, its name and size."""

    batch: int
    compact: bool
    name: str
    bytes: int


def log_files(path: str, backend: Backend = "auto", spark: Any | None = None) -> list[LogFile]:
    """Every file of `<path>/_spark_metadata`, batch order; a CheckpointError when the folder is missing."""
    store = open_storage(path, backend, spark)
    listing = store.list_dir(SINK_LOG_DIR)
    if listing is None:
        msg = f"{path} has no {SINK_LOG_DIR} folder: pass the output folder of a file sink to --sink"
        raise CheckpointError(msg)
    found = [
        LogFile(parsed[0], parsed[1], name, size)
        for name, size in listing.files
        if (parsed := log_file_batch(name)) is not None
    ]
    return sorted(found, key=lambda f: (f.batch, f.compact, f.name))


def entries_in(path: str, file: LogFile, backend: Backend = "auto", spark: Any | None = None) -> int:
    """How many entries one log file holds (its lines after the version line), streamed."""
    # Line 1 is the version ("v1"); every other line is one output file.
    return max(0, _count_lines(open_storage(path, backend, spark), f"{SINK_LOG_DIR}/{file.name}") - 1)


def log_folder(store: Storage) -> str | None:
    """The sink log folder's path below the sink, or None when the sink has none."""
    return SINK_LOG_DIR if store.list_dir(SINK_LOG_DIR) is not None else None


def inject_entries(sink: Storage, entries: tuple[str, ...], archive: Location) -> int:
    """Add log lines to the file the sink's readers start from (newest compact, else batch 0); return how many.

    Only call this while no query writes to the sink. The file is replaced atomically; its Hadoop
    checksum sibling no longer matches, so it moves into the archive (Hadoop skips a missing one).
    """
    sink_log = read_log(sink)
    if sink_log.latest_batch is None:
        msg = f"{sink.uri(SINK_LOG_DIR)} has no committed batch yet: the surviving files can only be added after one"
        raise CheckpointError(msg)
    names = log_names(sink)
    target_batch = sink_log.base_compact if sink_log.base_compact is not None else min(names)
    target = f"{SINK_LOG_DIR}/{names[target_batch]}"
    lines = (sink.read_bytes(target) or b"").decode("utf-8").splitlines()
    present = set(sink_log.files)
    added = [e for e in entries if entry_rel(sink.location, str(json.loads(e)["path"])) not in present]
    if not added:
        return 0
    sink.write_atomic(target, "\n".join([*lines, *added]).encode("utf-8"))
    aside = open_storage(archive.join("sink-metadata-new-crc"))
    for name in crc_companions(names[target_batch]):
        checksum = f"{SINK_LOG_DIR}/{name}"
        data = sink.read_bytes(checksum)
        if data is not None:
            aside.write_atomic(name, data)
            sink.delete(checksum)
    return len(added)


def query_log(checkpoint: Checkpoint, sink: Storage, up_to: int | None = None) -> SinkLog:
    """The file sink log of this checkpoint's query, read past the batches Spark's offline repartition committed,
    which the checkpoint proves wrote nothing (read_log's `empty`)."""
    return read_log(sink, up_to=up_to, empty=checkpoint.repartition_batches)


def marker_paths(sink: Location, marker: RecoveryMarker | None) -> set[str]:
    """The sink files (paths below the sink) the marker's surviving entries name."""
    if marker is None:
        return set()
    return {rel for line in marker.entries if (rel := entry_rel(sink, str(json.loads(line)["path"]))) is not None}
