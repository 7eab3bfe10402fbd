"""tidemark's own per-batch ledger of the sink: which files each committed batch wrote, and how many rows.

Spark's `_spark_metadata` log forgets entries when `[sink] retention` expires them at compaction, so
absence from it proves nothing. The ledger, kept in `<checkpoint>/_tidemark/ledger/`, is written by
the run after each batch commits and is never expired by Spark: the start-of-run sweep, rollback and
`tidemark audit` read it as evidence that a file belongs to a committed batch.

One small JSON file per batch; every `CHUNK` batches they are merged into one JSON-lines chunk (written
first, singles deleted after, so a crash in between only leaves duplicates, which readers merge).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from tidemark.compat import UTC
from tidemark.errors import CheckpointError
from tidemark.formats import LEDGER_DIR
from tidemark.sinks.parquet.log import COMPACT, batch_entries, log_names, read_log
from tidemark.storage import Storage

log = logging.getLogger(__name__)
CHUNK = 100
_SINGLE_SUFFIX = ".json"
_CHUNK_PREFIX = "chunk-"


@dataclass(frozen=True)
class LedgerEntry:
    """One committed batch: the sink files it added (paths below the sink, sizes) and the rows it wrote."""

    batch: int
    committed_at: str
    files: tuple[tuple[str, int], ...]
    rows: int | None

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(
            {"batch": self.batch, "committed_at": self.committed_at, "files": self.files, "rows": self.rows},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> LedgerEntry:
        """Parse one line (ValueError/KeyError/TypeError when it is not an entry)."""
        data = json.loads(text)
        rows = data.get("rows")
        return cls(
            batch=int(data["batch"]),
            committed_at=str(data["committed_at"]),
            files=tuple((str(f[0]), int(f[1])) for f in data["files"]),
            rows=None if rows is None else int(rows),
        )


def _single(batch: int) -> str:
    return f"{LEDGER_DIR}/{batch:012d}{_SINGLE_SUFFIX}"


def batch_files(sink: Storage, batch: int) -> list[str] | None:
    """The paths (below the sink) batch added to the sink log, or None when the log does not say.

    A compact batch lists every live file: its own are those the log at the batch before did not list.
    """
    plain = batch_entries(sink, batch)
    if plain is not None:
        return plain
    names = log_names(sink)
    if batch not in names or not names[batch].endswith(COMPACT):
        return None
    try:
        before = set(read_log(sink, up_to=batch - 1).files) if batch > 0 else set()
    except CheckpointError:
        return None  # the older log files are gone already: only the chunk-level sweep rule applies
    return sorted(set(read_log(sink, up_to=batch).files) - before)


def record_batch(checkpoint: Storage, sink: Storage, batch: int, rows: int | None) -> LedgerEntry | None:
    """Write the ledger entry of a batch that has just committed; None when its sink log file is missing."""
    files = batch_files(sink, batch)
    if files is None:
        return None
    present = {e.rel: e.size for e in (sink.stat(f) for f in files) if e is not None}
    entry = LedgerEntry(
        batch=batch,
        committed_at=datetime.now(tz=UTC).isoformat(),
        files=tuple((f, present.get(f, -1)) for f in files),
        rows=rows,
    )
    checkpoint.write_atomic(_single(batch), entry.to_json().encode("utf-8"))
    if (batch + 1) % CHUNK == 0:
        compact_ledger(checkpoint)
    return entry


def compact_ledger(checkpoint: Storage) -> int:
    """Merge the single-batch files into one chunk; return how many were merged."""
    listing = checkpoint.list_dir(LEDGER_DIR)
    singles = sorted(n for n, _ in (listing.files if listing else []) if n.endswith(_SINGLE_SUFFIX))
    if len(singles) < 2:
        return 0
    entries = [_parse(checkpoint, f"{LEDGER_DIR}/{n}", single=True) for n in singles]
    batches = sorted(e.batch for entry in entries for e in entry)
    name = f"{LEDGER_DIR}/{_CHUNK_PREFIX}{batches[0]:012d}-{batches[-1]:012d}.jsonl"
    lines = [e.to_json() for entry in entries for e in entry]
    checkpoint.write_atomic(name, ("\n".join(lines) + "\n").encode("utf-8"))
    for single in singles:
        checkpoint.delete(f"{LEDGER_DIR}/{single}")
    return len(singles)


def _parse(checkpoint: Storage, rel: str, *, single: bool) -> list[LedgerEntry]:
    data = checkpoint.read_bytes(rel)
    if data is None:
        return []
    try:
        text = data.decode("utf-8")
        lines = [text] if single else [line for line in text.splitlines() if line.strip()]
        return [LedgerEntry.from_json(line) for line in lines]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as exc:
        msg = f"the sink ledger file {checkpoint.uri(rel)} is corrupt: move it aside (it only adds evidence)"
        raise CheckpointError(msg) from exc


def read_ledger(checkpoint: Storage) -> dict[int, LedgerEntry]:
    """Every recorded batch (chunks and singles merged; the newest record of a batch wins)."""
    listing = checkpoint.list_dir(LEDGER_DIR)
    found: dict[int, LedgerEntry] = {}
    names = sorted(n for n, _ in (listing.files if listing else []))
    chunks = [n for n in names if n.startswith(_CHUNK_PREFIX)]
    singles = [n for n in names if n.endswith(_SINGLE_SUFFIX)]
    for name in chunks:
        for entry in _parse(checkpoint, f"{LEDGER_DIR}/{name}", single=False):
            found[entry.batch] = entry
    for name in singles:
        for entry in _parse(checkpoint, f"{LEDGER_DIR}/{name}", single=True):
            found[entry.batch] = entry
    return found


def ledger_files(checkpoint: Storage) -> dict[str, int]:
    """Sink path -> the batch that wrote it, by the ledger."""
    return {rel: entry.batch for entry in read_ledger(checkpoint).values() for rel, _ in entry.files}
