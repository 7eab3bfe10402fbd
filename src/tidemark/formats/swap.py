"""Swapping a rewritten checkpoint in place of the old one, on a local disk or an object store.

Object stores have no folder rename: a move is a copy and a delete of every file. So the new checkpoint is first
written completely beside the old one (`<parent>/.tidemark-archive/<name>-repartition-<stamp>`) while the old one
stays untouched; only then is the swap's journal written, naming two folder moves: the old checkpoint into the
archive, the new one into its place. Before the journal exists a kill leaves the old checkpoint as it was (and a
staging folder nothing reads); after it, any tidemark command that opens the checkpoint (`state repartition
--apply`, `run`) finishes the journal first, which moves what is left and never copies a file it has already
moved (a file in both places is copied again, then its source deleted). The journal records each finished move
(an ordered journal): the second move fills the very folder the first one emptied, so a rerun that replayed the
first would carry the new checkpoint's files into the archive (found by the kill test on S3). The old checkpoint
is archived, never deleted.
"""

from __future__ import annotations

from datetime import datetime

from tidemark.formats.layout import ARCHIVE_DIR
from tidemark.storage import Location, parse_location
from tidemark.storage.journal import JournalResult, Step, finish_pending, journal_purpose, journaled, pending_journals


def checkpoint_archive(checkpoint: Location) -> Location:
    """The folder beside a checkpoint where its swaps keep their journal, the staged copy and the old one."""
    return checkpoint.parent.join(ARCHIVE_DIR)


def swap_names(checkpoint: Location, now: datetime) -> tuple[Location, Location]:
    """(where the old checkpoint goes, where the new one is staged) for a swap at `now`."""
    folder = checkpoint_archive(checkpoint)
    stamp = f"{now:%Y%m%dT%H%M%S%fZ}"
    return (
        folder.join(f"{checkpoint.name}-before-repartition-{stamp}"),
        folder.join(f"{checkpoint.name}-repartition-{stamp}"),
    )


SWAP_PURPOSE = "repartition"


def swap_in(checkpoint: Location, archive: Location, staging: Location) -> JournalResult | None:
    """Archive the checkpoint and move the staged one into its place, journaled (finish_checkpoint_swaps)."""
    parent = checkpoint.parent
    folder = checkpoint_archive(checkpoint)
    steps = [
        Step(("parent", checkpoint.name), ("parent", f"{folder.name}/{archive.name}")),
        Step(("parent", f"{folder.name}/{staging.name}"), ("parent", checkpoint.name)),
    ]
    # ordered: the second move fills the folder the first emptied; a rerun must not replay the first.
    return journaled(folder, {"parent": parent.uri}, steps, SWAP_PURPOSE, {"archive": archive.uri}, ordered=True)


def finish_checkpoint_swaps(checkpoint: str | Location) -> list[JournalResult]:
    """Finish a swap a kill interrupted (its journal beside the checkpoint); nothing when there is none."""
    location = parse_location(checkpoint) if isinstance(checkpoint, str) else checkpoint
    return finish_pending(checkpoint_archive(location), purpose=SWAP_PURPOSE)


def pending_checkpoint_swaps(checkpoint: Location) -> list[str]:
    """The journals of swaps a kill interrupted beside the checkpoint (finish_checkpoint_swaps finishes them)."""
    return [j for j in pending_journals(checkpoint_archive(checkpoint)) if journal_purpose(j) == SWAP_PURPOSE]
