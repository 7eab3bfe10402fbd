"""Moving things aside, never deleting: a dated archive folder beside the sink, with journaled moves.

Every move of a recovery or rollback is written to a journal in the archive folder before the first file
moves; a rerun after a crash finishes the journal first, so each file ends in exactly one place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tidemark.compat import StrEnum
from tidemark.config import TidemarkConfig
from tidemark.context import PipelineContext, PipelineLocations
from tidemark.errors import UsageError
from tidemark.sinks import Tool
from tidemark.storage import Location, parse_location
from tidemark.storage.journal import AfterSteps, JournalResult, Step, finish_pending, journaled

log = logging.getLogger(__name__)


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
    """One file or folder moved into the archive (paths or URIs)."""

    kind: MoveKind
    source: str
    target: str


def pipeline_locations(config: TidemarkConfig, tool: Tool = Tool.RECOVER) -> PipelineLocations:
    """The locations of a config that no command resolved yet (PipelineContext.locations resolves them once)."""
    return PipelineContext.of(config).locations(tool)


def plan_move(kind: MoveKind, root: Location, rel: str, archive: Location, label: str) -> Move:
    """A move of rel (below root; '' for root itself) to archive/label/rel."""
    target = archive.join(label).join(rel) if rel else archive.join(label)
    return Move(kind, root.join(rel).uri, target.uri)


def _point(uri: str, roots: dict[str, Location], allowed: tuple[str, ...], what: str) -> tuple[str, str]:
    location = parse_location(uri)
    for name in allowed:
        rel = location.relative_to(roots[name])
        if rel is not None:
            return name, rel
    msg = f"refusing to move {what} {uri}: it is outside the pipeline's {', '.join(allowed)}"
    raise UsageError(msg)


def perform(
    moves: list[Move],
    locations: PipelineLocations,
    purpose: str,
    meta: dict[str, str] | None = None,
    after: AfterSteps | None = None,
) -> JournalResult | None:
    """Journal, then do the moves: sources inside the checkpoint, sink or quarantine, targets inside the archive.

    `after` runs once every move is done and before the journal goes, so a crash in between runs it again.
    """
    roots = locations.roots
    steps = [
        Step(
            _point(m.source, roots, ("checkpoint", "sink", "quarantine"), "from"),
            _point(m.target, roots, ("archive",), "to"),
        )
        for m in moves
    ]
    return journaled(locations.archive_base, {k: v.uri for k, v in roots.items()}, steps, purpose, meta, after)


def finish_interrupted(locations: PipelineLocations, after: AfterSteps | None = None) -> list[JournalResult]:
    """Finish the moves a crashed recovery, rollback or sweep left half done (a rerun calls this first)."""
    results = finish_pending(locations.archive_base, after)
    for result in results:
        log.warning(
            "finished an interrupted %s: %d file(s) moved, %d already in place",
            result.purpose or "move",
            result.moved_files,
            result.already_done,
        )
    return results
