"""The recovery marker a fresh checkpoint carries, and the repair of the new sink log it drives.

After a recovery the new query's sink log starts at batch 0 and does not know the files that
survived from before the resume point. Once the replay has committed a batch, those files are
added to the log (into the file Spark's readers start from), so Spark readers see them again.
The marker keeps the resume point too: every later run of this checkpoint keeps the same replay
filter, so a restart never rewrites a window the sink already holds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tidemark.errors import CheckpointError
from tidemark.recovery.sink import SINK_LOG, entry_path, log_names, read_log

MARKER = Path("_tidemark") / "recovery.json"


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


def _atomic_write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, target)


def write_marker(checkpoint: Path, marker: RecoveryMarker) -> None:
    """Write (or replace) the marker inside the checkpoint."""
    _atomic_write(checkpoint / MARKER, marker.to_json())


def read_marker(checkpoint: Path) -> RecoveryMarker | None:
    """The checkpoint's recovery marker, or None."""
    file = checkpoint / MARKER
    if not file.exists():
        return None
    try:
        return RecoveryMarker.from_json(file.read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"the recovery marker {file} is unreadable: fix or remove it (it holds the resume point)"
        raise CheckpointError(msg) from exc


def inject_entries(sink: Path, entries: tuple[str, ...], archive: Path) -> int:
    """Add log lines to the file the sink's readers start from (newest compact, else batch 0); return how many.

    Only call this while no query writes to the sink. The file is replaced atomically; its Hadoop
    checksum sibling no longer matches, so it moves into the archive (Hadoop skips a missing one).
    """
    log = read_log(sink)
    if log.latest_batch is None:
        msg = f"{sink}/{SINK_LOG} has no committed batch yet: the surviving files can only be added after one"
        raise CheckpointError(msg)
    names = log_names(sink)
    target_batch = log.base_compact if log.base_compact is not None else min(names)
    target = sink / SINK_LOG / names[target_batch]
    lines = target.read_text(encoding="utf-8").splitlines()
    present = set(log.files)
    added = [e for e in entries if _entry_path(e) not in present]
    if not added:
        return 0
    _atomic_write(target, "\n".join([*lines, *added]))
    checksum = target.parent / f".{target.name}.crc"
    if checksum.exists():
        aside = archive / "sink-metadata-new-crc" / checksum.name
        aside.parent.mkdir(parents=True, exist_ok=True)
        os.replace(checksum, aside)
    return len(added)


def _entry_path(line: str) -> str:
    return entry_path(str(json.loads(line)["path"]))


def finish_pending(checkpoint: Path, sink: Path) -> int | None:
    """Repair the new sink log if the marker says it is pending and a batch has committed; None if not yet."""
    marker = read_marker(checkpoint)
    if marker is None or marker.injected:
        return None
    if read_log(sink).latest_batch is None:
        return None
    added = inject_entries(sink, marker.entries, Path(marker.archive))
    write_marker(checkpoint, RecoveryMarker(marker.resume_from, marker.archive, marker.entries, injected=True))
    return added
