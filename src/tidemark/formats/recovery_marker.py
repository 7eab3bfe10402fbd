"""The recovery marker a fresh checkpoint carries (`_tidemark/recovery.json`): read, write, place.

After a recovery the new query's sink log starts at batch 0 and does not know the files that
survived from before the resume point. Once the replay has committed a batch, those files are
added to the log (into the file Spark's readers start from), so Spark readers see them again.
The marker keeps the resume point too: every later run of this checkpoint keeps the same replay
filter, so a restart never rewrites a window the sink already holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from tidemark.errors import CheckpointError
from tidemark.formats.layout import RECOVERY_MARKER
from tidemark.storage import Location, open_storage

MARKER = RECOVERY_MARKER


@dataclass(frozen=True)
class RecoveryMarker:
    """What a recovered checkpoint remembers: resume point, archive, surviving log lines, repaired or not."""

    resume_from: datetime
    archive: str
    entries: tuple[str, ...]
    injected: bool
    source_offsets: str | None = None  # Kafka: where the replay starts each partition (until its first commit)

    def to_json(self) -> str:
        """The marker file's content."""
        data: dict[str, object] = {
            "resume_from": self.resume_from.isoformat(),
            "archive": self.archive,
            "injected": self.injected,
            "entries": list(self.entries),
        }
        if self.source_offsets is not None:
            data["source_offsets"] = self.source_offsets
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RecoveryMarker:
        """Read the marker file's content."""
        data = json.loads(text)
        return cls(
            resume_from=datetime.fromisoformat(str(data["resume_from"])),
            archive=str(data["archive"]),
            entries=tuple(str(e) for e in data.get("entries", [])),
            injected=bool(data.get("injected", False)),
            source_offsets=str(data["source_offsets"]) if data.get("source_offsets") else None,
        )


def write_marker(checkpoint: Location, marker: RecoveryMarker) -> None:
    """Write (or replace) the checkpoint's recovery marker."""
    open_storage(checkpoint).write_atomic(MARKER, marker.to_json().encode("utf-8"))


def read_marker(checkpoint: Location) -> RecoveryMarker | None:
    """The checkpoint's recovery marker, or None."""
    store = open_storage(checkpoint)
    data = store.read_bytes(MARKER)
    if data is None:
        return None
    try:
        return RecoveryMarker.from_json(data.decode("utf-8"))
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"the recovery marker {store.uri(MARKER)} is unreadable: fix or remove it (it holds the resume point)"
        raise CheckpointError(msg) from exc


ARCHIVED_MARKER = "recovery.json"


def archive_marker(archive: Location, marker: RecoveryMarker) -> None:
    """Keep a copy of the marker in a recovery's archive (placed in the fresh checkpoint once the moves are done)."""
    open_storage(archive).write_atomic(ARCHIVED_MARKER, marker.to_json().encode("utf-8"))


def place_archived_marker(checkpoint: Location, archive: Location) -> RecoveryMarker | None:
    """Give the fresh checkpoint the marker its recovery kept in the archive, unless it has one already."""
    current = read_marker(checkpoint)
    if current is not None:
        return current
    data = open_storage(archive).read_bytes(ARCHIVED_MARKER)
    if data is None:
        return None
    marker = RecoveryMarker.from_json(data.decode("utf-8"))
    write_marker(checkpoint, marker)
    return marker
