"""Moving things aside, never deleting: a dated archive folder beside the sink, with guarded moves."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from tidemark.config import TidemarkConfig
from tidemark.errors import UsageError

ARCHIVE_DIR = ".tidemark-archive"


class MoveKind(StrEnum):
    """What a move takes aside."""

    CHECKPOINT = "checkpoint"
    SINK_METADATA = "sink-metadata"
    FAILED_BATCH_FILE = "failed-batch-file"
    REWRITTEN_PARTITION_FILE = "rewritten-partition-file"
    ROLLED_BACK_FILE = "rolled-back-file"
    CHECKPOINT_FILE = "checkpoint-file"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class Move:
    """One file or folder moved into the archive."""

    kind: MoveKind
    source: str
    target: str


@dataclass(frozen=True)
class PipelinePaths:
    """The local folders of a pipeline recovery may touch, and the archive beside the sink."""

    checkpoint: Path
    sink: Path
    quarantine: Path
    archive_base: Path

    def archive_for(self, now: datetime | None = None) -> Path:
        """A new dated archive folder (not created yet)."""
        when = now or datetime.now(tz=UTC)
        return self.archive_base / f"{when:%Y%m%dT%H%M%S%fZ}"


def _local(path: str, what: str) -> Path:
    if "://" in path and not path.startswith("file:"):
        msg = f"{what} {path} is not a local path: tidemark recover works on local (or mounted) folders only"
        raise UsageError(msg)
    return Path(path.removeprefix("file://").removeprefix("file:")).absolute()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def pipeline_paths(config: TidemarkConfig) -> PipelinePaths:
    """Resolve the pipeline's checkpoint, sink and quarantine; refuse layouts recovery cannot handle."""
    if config.sink.path is None or config.sink.format.value != "parquet":
        msg = 'tidemark recover needs a Parquet file sink ([sink] format = "parquet" with a path)'
        raise UsageError(msg)
    sink = _local(config.sink.path, "sink.path")
    checkpoint = _local(config.checkpoint.location, "checkpoint.location")
    quarantine = _local(config.quarantine.path, "quarantine.path")
    archive = sink.parent / ARCHIVE_DIR
    if _inside(sink, checkpoint) or _inside(checkpoint, sink):
        msg = f"the sink {sink} and the checkpoint {checkpoint} must not contain one another for recovery"
        raise UsageError(msg)
    if _inside(archive, checkpoint):
        msg = f"the archive {archive} would land inside the checkpoint {checkpoint}: move the sink elsewhere"
        raise UsageError(msg)
    return PipelinePaths(checkpoint, sink, quarantine, archive)


def plan_move(kind: MoveKind, source: Path, root: Path, archive: Path, label: str) -> Move:
    """A move of source (under root) to archive/label/<path relative to root>."""
    return Move(kind, str(source), str(archive / label / source.relative_to(root)))


def perform(moves: list[Move], allowed: list[Path]) -> None:
    """Do the moves in order; each source must lie under one of the allowed folders."""
    for move in moves:
        source, target = Path(move.source), Path(move.target)
        if not any(_inside(source, folder) for folder in allowed):
            msg = f"refusing to move {source}: it is outside the pipeline's sink, checkpoint and quarantine"
            raise UsageError(msg)
        if not source.exists() and not source.is_symlink():
            continue  # gone since the plan was made (e.g. a crc that Spark rewrote)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(source, target)
        except OSError:
            shutil.move(str(source), str(target))  # another device: copy, then remove
