"""One checkpoint on any store: the handle that reads its logs, operators and state stores.

Everything outside formats/ (inspect, prune, state, recovery, the watchdog, quarantine reconciliation) asks a
`Checkpoint` rather than reading `offsets/`, `commits/`, `sources/` or `state/` itself.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from tidemark.compat import StrEnum
from tidemark.errors import CheckpointError
from tidemark.formats.entries import (
    SHUFFLE_PARTITIONS,
    CommitEntry,
    OffsetEntry,
    OperatorMetadata,
    rewrite_offset_watermark,
)
from tidemark.formats.layout import (
    COMMITS,
    METADATA,
    OFFSETS,
    SPARK_PARTS,
    STATE,
    TIDEMARK_DIR,
    log_batch,
    log_entry,
    log_file_batch,
    operator_metadata_v1,
    operator_metadata_v2_dir,
    source_folder,
)
from tidemark.formats.scan import CheckpointScan, StoreScan, scan_checkpoint
from tidemark.storage import Backend, Location, Storage, open_storage

log = logging.getLogger(__name__)
_Entry = TypeVar("_Entry", OffsetEntry, CommitEntry)
# Spark's log entries are a few KB; anything far larger is not one, and is not read into memory.
MAX_LOG_ENTRY_BYTES = 64 * 1024**2
# The watchdog counts at most this many files per part of a checkpoint.
MAX_FILES_COUNTED = 200_000


class CheckpointStatus(StrEnum):
    """What is at a checkpoint location, as far as restarting a query from it goes."""

    MISSING = "missing"  # nothing there
    EMPTY = "empty"  # a folder, but no planned batch (no offsets)
    PRESENT = "present"  # at least one planned batch


class Checkpoint:
    """A streaming checkpoint folder on a local disk, Azure, S3, GCS or HDFS."""

    def __init__(self, store: Storage) -> None:
        self.store = store
        self._scan: CheckpointScan | None = None

    @classmethod
    def open(cls, path: str | Location, backend: Backend = "auto", spark: Any | None = None) -> Checkpoint:
        """Open the checkpoint at a path or URI (nothing is read yet)."""
        return cls(open_storage(path, backend, spark))

    @property
    def uri(self) -> str:
        """The checkpoint's location as the user gave it."""
        return self.store.uri()

    def exists(self) -> bool:
        """True when anything is stored at the location."""
        return self.store.exists("")

    def status(self) -> CheckpointStatus:
        """Missing, empty (no planned batch) or present."""
        if not self.exists():
            return CheckpointStatus.MISSING
        return CheckpointStatus.PRESENT if self.offset_batches() else CheckpointStatus.EMPTY

    def require(self, planned: bool = True) -> None:
        """Raise a one-line CheckpointError naming what is there when it is not a streaming checkpoint."""
        from tidemark.formats.identify import require_checkpoint

        require_checkpoint(self.store, planned=planned)

    # --- the offset and commit logs ------------------------------------------------------------------

    def batches(self, folder: str) -> list[int]:
        """Ascending batch ids of offsets/ or commits/ (empty when the folder does not exist)."""
        listing = self.store.list_dir(folder)
        if listing is None:
            return []
        return sorted(batch for name, _ in listing.files if (batch := log_batch(name)) is not None)

    def offset_batches(self) -> list[int]:
        """Planned batches (offsets/<batch>), ascending."""
        return self.batches(OFFSETS)

    def commit_batches(self) -> list[int]:
        """Committed batches (commits/<batch>), ascending."""
        return self.batches(COMMITS)

    def before_commit_log(self) -> bool:
        """True for a checkpoint Spark 2.0/2.1 wrote: no commits/ and its newest offsets entry without the SQL conf
        Spark 2.2 began recording (with the commit log). A restart then re-runs the newest planned batch L, which
        loads state version L (MicroBatchExecution.populateStartOffsets, its branch without a commit log)."""
        if self.store.list_dir(COMMITS) is not None:
            return False
        planned = self.offset_batches()
        entry = self.find_offset(planned[-1]) if planned else None
        return entry is not None and not entry.conf

    def latest_committed_batch(self) -> int:
        """The newest committed batch, or a CheckpointError when the query never committed one."""
        batches = self.commit_batches()
        if not batches:
            msg = f"{self.uri} has no committed batch yet: run the query until it commits one batch"
            raise CheckpointError(msg)
        return batches[-1]

    def read_text(self, rel: str, limit: int = MAX_LOG_ENTRY_BYTES) -> str | None:
        """A small file as text, or None when it is missing; a CheckpointError naming it when unreadable."""
        entry = self.store.stat(rel)
        if entry is None:
            return None
        if entry.size > limit:
            msg = f"{self.store.uri(rel)} is {entry.size:,} bytes, too large for a checkpoint log entry: it is corrupt"
            raise CheckpointError(msg)
        data = self.store.read_bytes(rel)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            msg = f"{self.store.uri(rel)} is not UTF-8 text: the checkpoint file is corrupt"
            raise CheckpointError(msg) from exc

    def commit_mtime(self, batch: int) -> float | None:
        """When commits/<batch> was written (epoch seconds), or None when missing or unknown."""
        entry = self.store.stat(log_entry(COMMITS, batch))
        return entry.mtime if entry is not None else None

    def file_counts(self, limit: int = MAX_FILES_COUNTED) -> dict[str, int]:
        """Data files (not .crc) under offsets/, commits/, sources/ and state/, counting at most limit per part."""
        counts: dict[str, int] = {}
        for part in SPARK_PARTS:
            total = 0
            for entry in self.store.list_files(part):
                total += not entry.rel.endswith(".crc")
                if total > limit:
                    break
            counts[part] = total
        return counts

    def _entry(self, folder: str, batch: int, parse: Callable[[int, str], _Entry], what: str) -> _Entry | None:
        rel = log_entry(folder, batch)
        text = self.read_text(rel)
        if text is None:
            return None
        try:
            return parse(batch, text)
        except (ValueError, TypeError, KeyError) as exc:
            msg = f"{self.store.uri(rel)} is not a valid Spark {what} log entry ({exc}): the checkpoint may be corrupt"
            raise CheckpointError(msg) from exc

    def offset(self, batch: int) -> OffsetEntry:
        """offsets/<batch>; a CheckpointError naming the file when missing or unreadable."""
        found = self._entry(OFFSETS, batch, OffsetEntry.parse, "offset")
        if found is None:
            msg = f"{self.store.uri(log_entry(OFFSETS, batch))} does not exist: batch {batch} was never planned"
            raise CheckpointError(msg)
        return found

    def commit(self, batch: int) -> CommitEntry:
        """commits/<batch>; a CheckpointError naming the file when missing or unreadable."""
        found = self._entry(COMMITS, batch, CommitEntry.parse, "commit")
        if found is None:
            msg = f"{self.store.uri(log_entry(COMMITS, batch))} does not exist: batch {batch} is not committed"
            raise CheckpointError(msg)
        return found

    def find_offset(self, batch: int) -> OffsetEntry | None:
        """offsets/<batch>, or None when missing or unreadable (logged): for reports that go on."""
        try:
            return self._entry(OFFSETS, batch, OffsetEntry.parse, "offset")
        except CheckpointError as exc:
            log.warning("%s", exc)
            return None

    def repartition_batches(self, batches: list[int]) -> dict[int, tuple[str | None, str | None]]:
        """Which of these batches Spark's offline repartition (4.2+, StreamingCheckpointManager.repartition) wrote,
        each with its (old, new) shuffle partitions.

        Recorded on 4.2.1: it writes batch N+1 as a copy of offsets/N (the same source offsets, watermark and batch
        timestamp) with the new `spark.sql.shuffle.partitions`, and commits/N+1 with N's watermark, after moving the
        state; the batch read no input and wrote no output (the file sink's log never gets it).
        """
        found = {}
        for batch in batches:
            entry, before = self.find_offset(batch), self.find_offset(batch - 1) if batch > 0 else None
            if entry is None or before is None:
                continue
            old, new = before.conf.get(SHUFFLE_PARTITIONS), entry.conf.get(SHUFFLE_PARTITIONS)
            copied = (entry.source_offsets, entry.watermark_ms, entry.timestamp_ms) == (
                before.source_offsets,
                before.watermark_ms,
                before.timestamp_ms,
            )
            if copied and old != new:
                found[batch] = (old, new)
        return found

    def find_commit(self, batch: int) -> CommitEntry | None:
        """commits/<batch>, or None when missing or unreadable (logged)."""
        try:
            return self._entry(COMMITS, batch, CommitEntry.parse, "commit")
        except CheckpointError as exc:
            log.warning("%s", exc)
            return None

    def plan_no_data_batch(self, after: int, watermark_ms: int, timestamp_ms: int) -> bool:
        """Write offsets/<after+1> as Spark plans a no-data batch: offsets/<after>'s source offsets and recorded conf,
        the given watermark and time. False when the batch is planned already (the write is exclusive); a
        CheckpointError naming the file when offsets/<after> is missing or has no metadata line."""
        rel = log_entry(OFFSETS, after)
        text = self.read_text(rel)
        if text is None:
            msg = f"{self.store.uri(rel)} does not exist: batch {after} was never planned"
            raise CheckpointError(msg)
        try:
            planned = rewrite_offset_watermark(text, watermark_ms, timestamp_ms)
        except (ValueError, TypeError) as exc:
            msg = f"{self.store.uri(rel)} cannot be read as a Spark offset log entry ({exc})"
            raise CheckpointError(msg) from exc
        return self.store.write_atomic(log_entry(OFFSETS, after + 1), planned.encode("utf-8"), exclusive=True)

    def query_id(self) -> str | None:
        """The query id from the metadata file, or None."""
        try:
            text = self.read_text(METADATA)
        except CheckpointError:
            return None
        if not text:
            return None
        try:
            value = json.loads(text.splitlines()[0])
        except (json.JSONDecodeError, IndexError):
            return None
        return str(value["id"]) if isinstance(value, dict) and "id" in value else None

    # --- operators and stores ------------------------------------------------------------------------

    def scan(self) -> CheckpointScan:
        """One walk of the whole checkpoint (made once, then kept)."""
        if self._scan is None:
            self._scan = scan_checkpoint(self.store)
        return self._scan

    def stores(self) -> dict[tuple[int, int, str], StoreScan]:
        """Every (operator, partition, store) with the versions its folder holds."""
        return {
            (op.id, part, name): store
            for op in self.scan().operators.values()
            for (part, name), store in op.stores.items()
        }

    def operator_ids(self) -> list[int]:
        """The ids of the state/<op> folders."""
        listing = self.store.list_dir(STATE)
        return sorted(int(d) for d in (listing.dirs if listing else []) if d.isdigit())

    def operator_metadata(self, op_id: int) -> OperatorMetadata | None:
        """What state/<op>/_metadata says (the newest v2 file for transformWithState), or None."""
        rel = operator_metadata_v1(op_id)
        text = self.read_text(rel)
        if text is None:
            folder = operator_metadata_v2_dir(op_id)
            listing = self.store.list_dir(folder)
            batches = sorted(int(n) for n, _ in (listing.files if listing else []) if n.isdigit())
            if batches:
                rel = f"{folder}/{batches[-1]}"
                text = self.read_text(rel)
        if text is None:
            return None
        try:
            return OperatorMetadata.parse(text)
        except (ValueError, TypeError) as exc:
            log.warning("cannot read %s: %s", self.store.uri(rel), exc)
            return None

    # --- sources -------------------------------------------------------------------------------------

    def source_files_by_batch(self, source: int = 0) -> dict[int, list[str]]:
        """Every source log entry's files by SOURCE log id (not the query's batch id: see source_files_of)."""
        folder = source_folder(source)
        files: dict[int, list[str]] = defaultdict(list)
        listing = self.store.list_dir(folder)
        for name, _ in listing.files if listing else []:
            if log_file_batch(name) is None:
                continue
            text = self.read_text(f"{folder}/{name}") or ""
            for number, line in enumerate(text.splitlines()[1:], start=2):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    path, batch = str(record["path"]), int(record["batchId"])
                except (ValueError, KeyError, TypeError) as exc:
                    msg = f"{self.store.uri(f'{folder}/{name}')} line {number} is not a file source entry: corrupt"
                    raise CheckpointError(msg) from exc
                if path not in files[batch]:
                    files[batch].append(path)
        return files

    def source_files_of(self, batches: list[int], source: int = 0) -> dict[int, list[str]]:
        """The files each given query batch read from a file source.

        A query batch and the source's own log are numbered apart (no-data batches add no source entry, and a
        restart can leave a source entry no batch used): batch N read the source entries after the `logOffset`
        its predecessor's offsets recorded, up to its own. Only those entries are read: each one's own log
        file, the compact file only where Spark has dropped it.
        """
        ranges: dict[int, tuple[int, int]] = {}
        for batch in batches:
            end = self._log_offset(batch, source)
            if end is None:
                continue
            start = self._log_offset(batch - 1, source) if batch > 0 else -1
            if start is None:
                log.warning(
                    "offsets/%d is gone: taking batch %d to have read source entry %d only", batch - 1, batch, end
                )
                start = end - 1
            ranges[batch] = (start, end)
        ids = sorted({i for first, last in ranges.values() for i in range(first + 1, last + 1)})
        entries = self._source_log_files(ids, source)
        return {
            b: [f for i in range(first + 1, last + 1) for f in entries.get(i, [])]
            for b, (first, last) in ranges.items()
        }

    def _log_offset(self, batch: int, source: int) -> int | None:
        entry = self.find_offset(batch)
        if entry is None or len(entry.source_offsets) <= source:
            return None
        value = entry.source_offsets[source]
        if isinstance(value, dict) and isinstance(value.get("logOffset"), int):
            return int(value["logOffset"])
        return None

    def _source_log_files(self, ids: list[int], source: int) -> dict[int, list[str]]:
        """Source log id -> files: each id's own log file, the compact file only where it is gone."""
        folder = source_folder(source)
        listing = self.store.list_dir(folder)
        names = {parsed[0]: name for name, _ in (listing.files if listing else []) if (parsed := log_file_batch(name))}
        found: dict[int, list[str]] = {}
        compacts = sorted(b for b, name in names.items() if name.endswith(".compact"))
        for batch in ids:
            name = names.get(batch)
            if name is None or name.endswith(".compact"):
                continue
            found[batch] = self._source_entries(f"{folder}/{name}", {batch}).get(batch, [])
        rest = set(ids) - set(found)
        for compact in compacts:
            covered = {b for b in rest if b <= compact}
            if covered:
                entries = self._source_entries(f"{folder}/{names[compact]}", covered)
                for batch in covered:
                    found[batch] = entries.get(batch, [])
                rest -= covered
        return found

    def _source_entries(self, rel: str, batches: set[int]) -> dict[int, list[str]]:
        files: dict[int, list[str]] = defaultdict(list)
        text = self.read_text(rel, limit=2**40) or ""
        for number, line in enumerate(text.splitlines()[1:], start=2):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                path, batch = str(record["path"]), int(record["batchId"])
            except (ValueError, KeyError, TypeError) as exc:
                msg = f"{self.store.uri(rel)} line {number} is not a file source entry: corrupt"
                raise CheckpointError(msg) from exc
            if batch in batches and path not in files[batch]:
                files[batch].append(path)
        return files

    def source_initial_offsets(self, source: int = 0) -> Any | None:
        """The offsets a source started from (sources/<n>/0, as Kafka writes it), or None."""
        try:
            text = self.read_text(log_entry(source_folder(source), 0))
        except CheckpointError:
            return None
        lines = (text or "").splitlines()
        if len(lines) < 2:
            return None
        try:
            return json.loads(lines[1])
        except json.JSONDecodeError:
            return None

    # --- tidemark's own folder -----------------------------------------------------------------------

    def tidemark_uri(self, name: str = "") -> str:
        """The URI of <checkpoint>/_tidemark/<name>."""
        return self.store.uri(f"{TIDEMARK_DIR}/{name}" if name else TIDEMARK_DIR)
