"""The recovery marker a fresh checkpoint carries, and the repair of the new sink log it drives.

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

from tidemark.checkpoint.layout import SINK_LOG_DIR, TIDEMARK_DIR, crc_companions
from tidemark.checkpoint.sink import entry_rel, log_names, read_log
from tidemark.errors import CheckpointError
from tidemark.storage import Location, Storage, open_storage, parse_location

MARKER = f"{TIDEMARK_DIR}/recovery.json"


@dataclass(frozen=True)
class RecoveryMarker:
    """What a recovered checkpoint remembers: resume point, archive, surviving log lines, repaired or not."""

    resume_from: datetime
    archive: str
    entries: tuple[str, ...]
    injected: bool

    def to_json(self) -> str:
        """The marker file's content."""
        return json.dumps(
            {
                "resume_from": self.resume_from.isoformat(),
                "archive": self.archive,
                "injected": self.injected,
                "entries": list(self.entries),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> RecoveryMarker:
        """Read the marker file's content."""
        data = json.loads(text)
        return cls(
            resume_from=datetime.fromisoformat(str(data["resume_from"])),
            archive=str(data["archive"]),
            entries=tuple(str(e) for e in data.get("entries", [])),
            injected=bool(data.get("injected", False)),
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


def marker_paths(sink: Location, marker: RecoveryMarker | None) -> set[str]:
    """The sink files (paths below the sink) the marker's surviving entries name."""
    if marker is None:
        return set()
    return {rel for line in marker.entries if (rel := entry_rel(sink, str(json.loads(line)["path"]))) is not None}


def inject_entries(sink: Storage, entries: tuple[str, ...], archive: Location) -> int:
    """Add log lines to the file the sink's readers start from (newest compact, else batch 0); return how many.

    Only call this while no query writes to the sink. The file is replaced atomically; its Hadoop
    checksum sibling no longer matches, so it moves into the archive (Hadoop skips a missing one).
    """
    log = read_log(sink)
    if log.latest_batch is None:
        msg = f"{sink.uri(SINK_LOG_DIR)} has no committed batch yet: the surviving files can only be added after one"
        raise CheckpointError(msg)
    names = log_names(sink)
    target_batch = log.base_compact if log.base_compact is not None else min(names)
    target = f"{SINK_LOG_DIR}/{names[target_batch]}"
    lines = (sink.read_bytes(target) or b"").decode("utf-8").splitlines()
    present = set(log.files)
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


def finish_pending(checkpoint: Location, sink: Location) -> int | None:
    """Repair the new sink log if the marker says it is pending and a batch has committed; None if not yet."""
    marker = read_marker(checkpoint)
    if marker is None or marker.injected:
        return None
    store = open_storage(sink)
    if read_log(store).latest_batch is None:
        return None
    added = inject_entries(store, marker.entries, parse_location(marker.archive))
    write_marker(checkpoint, RecoveryMarker(marker.resume_from, marker.archive, marker.entries, injected=True))
    return added
