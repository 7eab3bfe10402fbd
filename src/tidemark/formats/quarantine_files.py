"""The quarantine folder's own files: the marker of the newest batch written, and the batches' files and folders."""

from __future__ import annotations

from tidemark.formats.layout import QUARANTINE_MARKER, quarantine_batch
from tidemark.storage import open_storage


def read_marker(quarantine_dir: str) -> int | None:
    """The newest batch whose malformed records were written (or found to be none)."""
    data = open_storage(quarantine_dir).read_bytes(QUARANTINE_MARKER)
    try:
        return int(data.decode("utf-8").strip()) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def write_marker(quarantine_dir: str, batch_id: int) -> None:
    """Record that every batch up to batch_id has had its malformed records written."""
    open_storage(quarantine_dir).write_atomic(QUARANTINE_MARKER, str(batch_id).encode("utf-8"))


def entries_after(quarantine_dir: str, batch: int) -> list[str]:
    """The quarantine files (`batch-<id>.jsonl`) and folders (`batch-<id>/`, executor-written) after a batch."""
    listing = open_storage(quarantine_dir).list_dir("")
    if listing is None:
        return []
    found = []
    for name in sorted([n for n, _ in listing.files] + list(listing.dirs)):
        found_batch = quarantine_batch(name)
        if found_batch is not None and found_batch > batch:
            found.append(name)
    return found
