"""Read the few checkpoint facts state inspection needs (offsets, commits, state folders) without Spark."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tidemark.checkpoint.layout import COMMITS, OFFSETS, CommitEntry, OffsetEntry, batch_ids
from tidemark.errors import CheckpointError

_Entry = TypeVar("_Entry", OffsetEntry, CommitEntry)
# Sub-folders of a state partition folder that are not named stores.
_NOT_STORES = frozenset({"_metadata", "SSTs", "logs", "_stateSchema"})


@dataclass(frozen=True)
class OperatorFolder:
    """What the file system says about one state/<op> folder."""

    operator_id: int
    partitions: tuple[int, ...]
    stores: tuple[str, ...]
    has_operator_metadata: bool
    has_changelog: bool
    disk_bytes: int


def checkpoint_path(path: str | Path) -> Path:
    """Return the checkpoint folder as a Path, or raise a CheckpointError naming what is missing."""
    root = Path(str(path).removeprefix("file://")).expanduser()
    if not root.is_dir():
        msg = f"checkpoint folder {root} does not exist: pass the checkpointLocation of the query"
        raise CheckpointError(msg)
    if not (root / "offsets").is_dir():
        msg = f"{root} is not a streaming checkpoint (no offsets/ folder): pass the checkpointLocation of the query"
        raise CheckpointError(msg)
    return root


def committed_batches(root: Path) -> list[int]:
    """Batch ids that have a commits/<batch> file, ascending."""
    return batch_ids(root / "commits")


def latest_committed_batch(root: Path) -> int:
    """The newest committed batch, or a CheckpointError when the query never committed one."""
    batches = committed_batches(root)
    if not batches:
        msg = f"{root} has no committed batch yet: run the query until it commits one batch"
        raise CheckpointError(msg)
    return batches[-1]


def _log_lines(file: Path) -> list[str]:
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        msg = f"cannot read {file}: {exc.strerror}"
        raise CheckpointError(msg) from exc


def _json_line(file: Path, lines: list[str]) -> dict[str, Any]:
    if len(lines) < 2:
        return {}
    try:
        value = json.loads(lines[1])
    except json.JSONDecodeError as exc:
        msg = f"{file} is not a valid Spark log file (line 2 is not JSON): the checkpoint may be corrupt"
        raise CheckpointError(msg) from exc
    return value if isinstance(value, dict) else {}


def _entry(file: Path) -> str:
    lines = _log_lines(file)
    _json_line(file, lines)
    return "\n".join(lines)


def _read_entry(root: Path, folder: str, batch: int, parse: Callable[[int, str], _Entry], what: str) -> _Entry:
    file = root / folder / str(batch)
    try:
        return parse(batch, _entry(file))
    except ValueError as exc:
        msg = f"{file} is not a valid Spark {what} log entry: the checkpoint may be corrupt"
        raise CheckpointError(msg) from exc


def read_commit(root: Path, batch: int) -> CommitEntry:
    """The commits/<batch> entry of a checkpoint."""
    return _read_entry(root, COMMITS, batch, CommitEntry.parse, "commit")


def read_offsets(root: Path, batch: int) -> OffsetEntry:
    """The offsets/<batch> entry of a checkpoint."""
    return _read_entry(root, OFFSETS, batch, OffsetEntry.parse, "offset")


def _folder_size(folder: Path) -> int:
    # .crc siblings are Hadoop checksums, not state.
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.name.endswith(".crc"))


def operator_folders(root: Path) -> list[OperatorFolder]:
    """Every state/<op> folder with its partitions, named stores and on-disk size."""
    state = root / "state"
    if not state.is_dir():
        return []
    found = []
    for op_dir in sorted((p for p in state.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        part_dirs = sorted((p for p in op_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        stores: set[str] = set()
        changelog = False
        for part in part_dirs:
            for child in part.iterdir():
                if child.is_dir() and child.name not in _NOT_STORES:
                    stores.add(child.name)
                if ".changelog" in child.name and not child.name.startswith("."):
                    changelog = True
            changelog = changelog or any(f.name.endswith(".changelog") for f in part.glob("*/*.changelog"))
        has_metadata = (op_dir / "_metadata" / "metadata").is_file() or (op_dir / "_metadata" / "v2").is_dir()
        size = _folder_size(op_dir)
        if not has_metadata and size == 0:
            # Spark's statestore reader leaves empty state/<op>/<part>/_metadata folders behind when asked
            # for an operator that does not exist: not an operator.
            continue
        found.append(
            OperatorFolder(
                operator_id=int(op_dir.name),
                partitions=tuple(int(p.name) for p in part_dirs),
                stores=tuple(sorted(stores)) or ("default",),
                has_operator_metadata=has_metadata,
                has_changelog=changelog,
                disk_bytes=size,
            )
        )
    return found
