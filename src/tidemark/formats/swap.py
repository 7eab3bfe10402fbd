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

A kill before the journal (while the new checkpoint is uploaded) leaves a partly staged copy nothing reads. Its
writer records itself beside it first (`<staging>.owner.json`: host and process), so the next `state repartition
--apply` can tell a copy whose writer is dead, which it removes, from one another repartition is still writing,
which it leaves (remove_abandoned_stagings). The swap's journal removes the record once the staged copy is in place.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tidemark.compat import UTC
from tidemark.formats.layout import ARCHIVE_DIR
from tidemark.formats.lock import pid_alive
from tidemark.storage import Location, open_storage, parse_location
from tidemark.storage.journal import (
    JournalResult,
    Step,
    finish_pending,
    journal_purpose,
    journaled,
    pending_journals,
)

log = logging.getLogger(__name__)
OWNER_SUFFIX = ".owner.json"


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
AfterSwap = Callable[[JournalResult], None]


def swap_in(checkpoint: Location, archive: Location, staging: Location) -> JournalResult | None:
    """Archive the checkpoint and move the staged one into its place, journaled (finish_checkpoint_swaps)."""
    parent = checkpoint.parent
    folder = checkpoint_archive(checkpoint)
    steps = [
        Step(("parent", checkpoint.name), ("parent", f"{folder.name}/{archive.name}")),
        Step(("parent", f"{folder.name}/{staging.name}"), ("parent", checkpoint.name)),
    ]
    meta = {"archive": archive.uri, "owner": _owner_name(staging)}
    # ordered: the second move fills the folder the first emptied; a rerun must not replay the first.
    return journaled(folder, {"parent": parent.uri}, steps, SWAP_PURPOSE, meta, _drop_owner(folder), ordered=True)


def finish_checkpoint_swaps(checkpoint: str | Location) -> list[JournalResult]:
    """Finish a swap a kill interrupted (its journal beside the checkpoint); nothing when there is none."""
    location = parse_location(checkpoint) if isinstance(checkpoint, str) else checkpoint
    folder = checkpoint_archive(location)
    return finish_pending(folder, _drop_owner(folder), purpose=SWAP_PURPOSE)


def _owner_name(staging: Location) -> str:
    return f"{staging.name}{OWNER_SUFFIX}"


def _drop_owner(folder: Location) -> AfterSwap:
    """After the swap's moves (a crash before the journal is removed repeats it): the staged copy's owner record
    goes, the staged copy now being the checkpoint."""

    def drop(result: JournalResult) -> None:
        owner = result.meta.get("owner")
        if owner:
            open_storage(folder).delete(owner)

    return drop


@dataclass(frozen=True)
class StagingOwner:
    """Who stages a new checkpoint beside the old one: the host and process of the `state repartition --apply`."""

    host: str
    pid: int
    started: str

    @property
    def gone(self) -> bool:
        """True when its process is known to be dead: on this host and no longer running."""
        return self.host == socket.gethostname() and not pid_alive(self.pid)


def claim_staging(staging: Location) -> None:
    """Record this process as the writer of the staged copy, before its first file (remove_abandoned_stagings)."""
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": datetime.now(tz=UTC).isoformat()}
    open_storage(staging.parent).write_atomic(_owner_name(staging), json.dumps(owner).encode("utf-8"))


def release_staging(staging: Location) -> None:
    """The staged copy is gone (discarded after a failure): its owner record goes too."""
    open_storage(staging.parent).delete(_owner_name(staging))


def _read_owner(data: bytes | None) -> StagingOwner | None:
    try:
        body = json.loads(data or b"")
        return StagingOwner(str(body["host"]), int(body["pid"]), str(body.get("started", "")))
    except (ValueError, KeyError, TypeError):
        return None


def remove_abandoned_stagings(checkpoint: Location) -> tuple[list[str], list[str]]:
    """Remove the staged copies beside the checkpoint that repartitions killed before their swap left: those whose
    writer's process is dead on this host. Returns (removed, kept): a copy staged from another host, or one whose
    writer still runs, is kept and named (delete it by hand once no repartition runs there). Call it after
    finish_checkpoint_swaps: a staged copy a pending swap names is never touched."""
    folder = checkpoint_archive(checkpoint)
    store = open_storage(folder)
    listing = store.list_dir("")
    if listing is None:
        return [], []
    pending = bool(pending_checkpoint_swaps(checkpoint))  # never beside a swap not finished yet
    removed: list[str] = []
    kept: list[str] = []
    for name, _size in listing.files:
        if not name.endswith(OWNER_SUFFIX) or pending:
            continue
        staging = folder.join(name[: -len(OWNER_SUFFIX)])
        owner = _read_owner(store.read_bytes(name))
        if owner is None or not owner.gone:
            kept.append(staging.uri)
            continue
        staged = open_storage(staging)
        rels = [entry.rel for entry in staged.list_files("")]
        if staging.is_local:
            shutil.rmtree(staging.key, ignore_errors=True)
        elif rels:
            staged.delete_files(rels)
        store.delete(name)  # last: a kill before it leaves the record, and the next rerun removes what is left
        log.warning("removed %s, staged by a repartition killed before its swap (%d files)", staging.uri, len(rels))
        removed.append(staging.uri)
    for uri in kept:
        log.warning("kept %s: staged by a repartition that may still run (another host, or a live process)", uri)
    return removed, kept


def pending_checkpoint_swaps(checkpoint: Location) -> list[str]:
    """The journals of swaps a kill interrupted beside the checkpoint (finish_checkpoint_swaps finishes them)."""
    return [j for j in pending_journals(checkpoint_archive(checkpoint)) if journal_purpose(j) == SWAP_PURPOSE]
