"""The file sink as recovery sees it: its `_spark_metadata` log, its data files, their window partitions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

from tidemark.checkpoint.layout import sink_log_batch
from tidemark.errors import CheckpointError

SINK_LOG = "_spark_metadata"
COMPACT = ".compact"


@dataclass(frozen=True)
class SinkLog:
    """What the sink's metadata log says is committed: the live files, as Spark readers see them."""

    batches: tuple[int, ...]  # every batch id that has a log file (plain or compact)
    latest_batch: int | None
    base_compact: int | None  # the compact file the live list starts from, if any
    files: dict[str, str]  # absolute local path -> the exact JSON line Spark wrote for it

    @property
    def exists(self) -> bool:
        """True when the log holds at least one batch (a new query would skip its batch ids)."""
        return bool(self.batches)


def entry_path(uri: str) -> str:
    """The local path of a log entry's `file:` URI (Spark URI-encodes the already Hive-escaped path)."""
    return os.path.abspath(unquote(urlparse(uri).path))


def log_names(sink: Path) -> dict[int, str]:
    """Batch id -> file name of every log file in `<sink>/_spark_metadata`."""
    folder = sink / SINK_LOG
    if not folder.is_dir():
        return {}
    found: dict[int, str] = {}
    for child in folder.iterdir():
        parsed = sink_log_batch(child.name)
        if parsed is not None:
            found[parsed[0]] = child.name
    return found


def _read_entries(file: Path) -> list[tuple[str, str, dict[str, object]]]:
    """(local path, raw line, parsed entry) of every entry of one log file."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        msg = f"cannot read the sink log file {file}: {exc.strerror}"
        raise CheckpointError(msg) from exc
    if not lines or not lines[0].startswith("v"):
        msg = f"sink log file {file} is empty or has no version line: it is corrupt; run `tidemark recover`"
        raise CheckpointError(msg)
    entries = []
    for line in lines[1:]:
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            msg = f"sink log file {file} has a line that is not JSON: it is corrupt; run `tidemark recover`"
            raise CheckpointError(msg) from exc
        entries.append((entry_path(str(entry["path"])), line, entry))
    return entries


def read_log(sink: Path, up_to: int | None = None) -> SinkLog:
    """The live file list of the log at batch `up_to` (default: the newest), as Spark's allFiles builds it."""
    names = log_names(sink)
    usable = sorted(b for b in names if up_to is None or b <= up_to)
    if not usable:
        return SinkLog(tuple(sorted(names)), None, None, {})
    latest = usable[-1]
    compacts = [b for b in usable if names[b].endswith(COMPACT)]
    base = compacts[-1] if compacts else None
    start = base if base is not None else 0
    files: dict[str, str] = {}
    for batch in range(start, latest + 1):
        if batch not in names:
            msg = (
                f"{sink}/{SINK_LOG} has no file for batch {batch} (needed to list batch {latest}): "
                "the sink log is incomplete"
            )
            raise CheckpointError(msg)
        for path, line, entry in _read_entries(sink / SINK_LOG / names[batch]):
            if entry.get("action") == "delete":
                files.pop(path, None)
            else:
                files[path] = line
    return SinkLog(tuple(sorted(names)), latest, base, files)


def data_files(sink: Path) -> list[Path]:
    """Every data file under the sink (hidden, `_`-prefixed and crc files skipped, as Parquet readers do)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(sink):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found.extend(Path(root) / f for f in sorted(files) if not f.startswith(("_", ".")) and not f.endswith(".crc"))
    return found


def partition_value(path: Path, sink: Path, column: str) -> str | None:
    """The raw (unescaped) value of a Hive partition folder `column=value` on the way to path."""
    for part in path.relative_to(sink).parts[:-1]:
        name, sep, value = part.partition("=")
        if sep and name == column:
            return unquote(value)
    return None


def partition_start(path: Path, sink: Path, column: str = "windowStart") -> datetime | None:
    """The window start of a file in a `windowStart=...` partition (UTC), or None."""
    value = partition_value(path, sink, column)
    if value is None or value == "__HIVE_DEFAULT_PARTITION__":
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def companions(path: Path) -> list[Path]:
    """The file and the checksum files Hadoop and Spark wrote beside it, those that exist."""
    names = [path.name, f".{path.name}.crc", f"{path.name}.crc", f".{path.name}.crc.crc"]
    return [path.parent / n for n in names if (path.parent / n).exists()]
