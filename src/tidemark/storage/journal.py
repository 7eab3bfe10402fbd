"""Journaled moves and deletes: the plan is written before the first file moves, so a rerun finishes it.

A move is a rename on a local disk and copy-then-delete on an object store, where a crash between the
two leaves a file in both places. The journal names its roots once and lists every step relative to
them; `finish_pending` replays the steps that are not done: a step whose source is gone and whose
target is there is done, one with both is copied again (when the copy's size differs) and then deleted,
and one with neither is reported as lost, never guessed.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from tidemark.compat import UTC
from tidemark.errors import StorageError
from tidemark.steps import step as progress_step
from tidemark.storage.base import Storage, join
from tidemark.storage.objectstore import ObjectStore
from tidemark.storage.open import open_storage
from tidemark.storage.uri import Location, parse_location

log = logging.getLogger(__name__)
JOURNAL_PREFIX = "journal-"
JOURNAL_SUFFIX = ".json"
# Files of one folder move moved at once on an object store (Runner.move).
MOVE_THREADS = 16


@dataclass(frozen=True)
class Step:
    """Move source to target, or (no target) delete source; each is (root name, path below it, '' = the root)."""

    source: tuple[str, str]
    target: tuple[str, str] | None = None

    def to_json(self) -> list[str]:
        """The step as written in the journal."""
        return [*self.source, *(self.target or ())]

    @classmethod
    def from_json(cls, data: list[str]) -> Step:
        """Read one step."""
        if len(data) == 2:
            return cls((str(data[0]), str(data[1])))
        return cls((str(data[0]), str(data[1])), (str(data[2]), str(data[3])))


@dataclass(frozen=True)
class JournalResult:
    """What running (or finishing) a journal did."""

    journal: str
    purpose: str
    steps: int
    moved_files: int
    deleted_files: int
    already_done: int
    meta: dict[str, str]  # what the writer of the journal wanted to remember (e.g. the archive folder)


# Runs after the last step and before the journal is removed: a crash in it is retried by the next rerun.
AfterSteps = Callable[[JournalResult], None]


def _copy(source: Storage, source_rel: str, target: Storage, target_rel: str, size: int | None = None) -> None:
    """Copy one file (of this size, when known): server-side within one bucket, else through this process."""
    if isinstance(source, ObjectStore) and isinstance(target, ObjectStore) and source.same_bucket(target):
        source.copy_to(source_rel, target, target_rel, size)
        return
    with source.open_read(source_rel) as handle:
        data = handle.read()
    target.write_atomic(target_rel, data)


def _merge_local(source: str, target: str) -> None:
    """Finish a folder move a crash interrupted: move what is left of source into target, then drop source."""
    for root, _dirs, files in os.walk(source, topdown=False):
        for name in files:
            src = os.path.join(root, name)
            dst = os.path.join(target, os.path.relpath(src, source))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
        os.rmdir(root)


class _Runner:
    def __init__(self, roots: dict[str, str]) -> None:
        self.roots = {name: parse_location(uri) for name, uri in roots.items()}
        self._stores: dict[str, Storage] = {}
        self.moved = 0
        self.deleted = 0
        self.done = 0

    def store(self, root: str) -> Storage:
        if root not in self._stores:
            if root not in self.roots:
                msg = f"the move journal names an unknown root {root!r}: it is corrupt"
                raise StorageError(msg)
            self._stores[root] = open_storage(self.roots[root])
        return self._stores[root]

    def location(self, point: tuple[str, str]) -> Location:
        return self.roots[point[0]].join(point[1])

    def delete_all(self, steps: list[Step]) -> None:
        """Delete steps of one root: their files in as few requests as the store allows, then any folders."""
        if not steps:
            return
        store = self.store(steps[0].source[0])
        rels = [step.source[1] for step in steps]
        if not all(rels):
            msg = f"the move journal asks to delete the whole of {store.uri()}: refusing; it is corrupt"
            raise StorageError(msg)
        not_files = set(store.delete_files(rels))
        self.deleted += len(rels) - len(not_files)
        for step in steps:
            if step.source[1] in not_files:
                self.delete(step)  # a folder (everything below it), or already gone

    def delete(self, step: Step) -> None:
        store, rel = self.store(step.source[0]), step.source[1]
        if not rel:
            msg = f"the move journal asks to delete the whole of {store.uri()}: refusing; it is corrupt"
            raise StorageError(msg)
        if store.stat(rel) is not None:
            store.delete(rel)
            self.deleted += 1
            return
        files = list(store.list_files(rel))
        if not files:
            self.done += 1
        for entry in files:
            store.delete(entry.rel)
            self.deleted += 1

    def move(self, step: Step) -> None:
        assert step.target is not None
        source_loc, target_loc = self.location(step.source), self.location(step.target)
        if source_loc.is_local and target_loc.is_local:
            self._move_local(source_loc.key, target_loc.key, step)
            return
        source, source_rel = self.store(step.source[0]), step.source[1]
        target, target_rel = self.store(step.target[0]), step.target[1]
        single = source.stat(source_rel) if source_rel else None
        files = [single] if single is not None else list(source.list_files(source_rel))
        if not files:
            if target.exists(target_rel):
                self.done += 1
                return
            msg = f"the journal moves {source_loc.uri} to {target_loc.uri} but neither exists: nothing was moved there"
            raise StorageError(msg)

        def destination(rel: str) -> str:
            suffix = rel[len(source_rel) :].lstrip("/") if source_rel else rel
            return join(target_rel, suffix) if suffix else target_rel

        # (source, target, size) of each file
        if single is not None:
            moves = [(source_rel, target_rel, single.size)]
        else:
            moves = [(entry.rel, destination(entry.rel), entry.size) for entry in files]
        # What a killed run copied already, from one listing of the target (not a stat a file); a copy whose size
        # differs is copied again.
        if single is None:
            there = {e.rel: e.size for e in target.list_files(target_rel)}
        else:
            found = target.stat(target_rel)
            there = {target_rel: found.size} if found is not None else {}
        copies = [move for move in moves if there.get(move[1]) != move[2]]

        def one(copy: tuple[str, str, int]) -> None:
            _copy(source, copy[0], target, copy[1], copy[2])

        # A folder of an object store moves file by file, one server-side copy each: MOVE_THREADS at once (the
        # seed incident's checkpoint: 203,786 files at 20 ms a request), then the sources go in batches (Azure 256,
        # S3 1,000 a request). No source goes before every copy is there, so a crash leaves each file in one
        # place or both, and a rerun (which lists the target again) finishes the move.
        if len(copies) == 1:
            one(copies[0])
        elif copies:
            with ThreadPoolExecutor(MOVE_THREADS, thread_name_prefix="tidemark-move") as pool:
                list(pool.map(one, copies))
        rels = [rel for rel, _, _ in moves]
        if isinstance(source, ObjectStore):
            source.delete_present(rels)
        else:
            for rel in rels:
                source.delete(rel)
        self.moved += len(files)

    def _move_local(self, source: str, target: str, step: Step) -> None:
        if not os.path.lexists(source):
            if os.path.lexists(target):
                self.done += 1
                return
            msg = f"the journal moves {source} to {target} but neither exists: nothing was moved there"
            raise StorageError(msg)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(source) and os.path.lexists(target):
            _merge_local(source, target)
        else:
            try:
                os.replace(source, target)
            except OSError:
                import shutil  # another device: copy, then remove

                shutil.move(source, target)
        self.moved += 1


def _journal_name(now: datetime | None = None) -> str:
    when = now or datetime.now(tz=UTC)
    return f"{JOURNAL_PREFIX}{when:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:6]}{JOURNAL_SUFFIX}"


def write_journal(
    folder: str | Location,
    roots: dict[str, str],
    steps: Iterable[Step],
    purpose: str,
    meta: dict[str, str] | None = None,
    *,
    ordered: bool = False,
) -> str:
    """Write the journal of steps into folder, before anything moves; return its URI.

    ordered: the steps depend on each other's order (a later step fills what an earlier one emptied, as a swap's
    second move fills the folder its first one moved away), so the journal records each finished step and a rerun
    starts after the last one: replaying a finished step would move the later step's files back out. A write per
    step, so only for journals of a few steps."""
    store = open_storage(folder)
    name = _journal_name()
    body: dict[str, object] = {
        "version": 1,
        "purpose": purpose,
        "created": datetime.now(tz=UTC).isoformat(),
        "meta": meta or {},
        "roots": roots,
        "steps": [s.to_json() for s in steps],
    }
    if ordered:
        body["done"] = 0
    store.write_atomic(name, _encode(body))
    return store.uri(name)


def _encode(body: dict[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


# Deletes handed to the store at once (Azure sends them 256 a request).
DELETE_BATCH = 2048


def run_journal(journal: str, after: AfterSteps | None = None) -> JournalResult:
    """Carry out every step of a journal not done yet, then `after`, then remove the journal."""
    location = parse_location(journal)
    folder = open_storage(location.parent)
    data = folder.read_bytes(location.name)
    if data is None:
        msg = f"the move journal {journal} disappeared: another process may be finishing it"
        raise StorageError(msg)
    try:
        body = json.loads(data)
        purpose = str(body.get("purpose", ""))
        meta = {str(k): str(v) for k, v in (body.get("meta") or {}).items()}
        runner = _Runner({str(k): str(v) for k, v in body["roots"].items()})
        steps = [Step.from_json(s) for s in body["steps"]]
        ordered = "done" in body
        done = int(body.get("done", 0))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        msg = f"the move journal {journal} is unreadable: fix or remove it (it lists an interrupted move)"
        raise StorageError(msg) from exc
    moves = sum(1 for s in steps if s.target is not None)
    what = f"{purpose}: {'moving' if moves else 'removing'} files" if purpose else "moving files"
    pending: list[Step] = []  # consecutive deletes in one root, handed to the store together
    with progress_step(what, total=len(steps)) as advance:
        if ordered:
            advance(done)
            for index in range(done, len(steps)):
                step = steps[index]
                if step.target is not None:
                    runner.move(step)
                else:
                    runner.delete(step)
                advance(1)
                body["done"] = index + 1  # finished: a rerun starts after it
                folder.write_atomic(location.name, _encode(body))
            steps = []
        for step in steps:
            same_root = pending and step.source[0] == pending[0].source[0]
            if pending and (step.target is not None or not same_root or len(pending) >= DELETE_BATCH):
                runner.delete_all(pending)
                advance(len(pending))
                pending = []
            if step.target is not None:
                runner.move(step)
                advance(1)
            else:
                pending.append(step)
        runner.delete_all(pending)
        advance(len(pending))
    count = len(body["steps"])
    result = JournalResult(journal, purpose, count, runner.moved, runner.deleted, runner.done, meta)
    if after is not None:
        after(result)
    folder.delete(location.name)
    return result


def pending_journals(folder: str | Location) -> list[str]:
    """URIs of the journals left in folder by runs that did not finish, oldest first."""
    store = open_storage(folder)
    listing = store.list_dir("")
    if listing is None:
        return []
    names = sorted(n for n, _ in listing.files if n.startswith(JOURNAL_PREFIX) and n.endswith(JOURNAL_SUFFIX))
    return [store.uri(n) for n in names]


def journal_purpose(journal: str) -> str | None:
    """What a journal was written for (recovery, rollback, repartition ...); None when it is gone or unreadable."""
    location = parse_location(journal)
    data = open_storage(location.parent).read_bytes(location.name)
    try:
        return str(json.loads(data)["purpose"]) if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None


def finish_pending(
    folder: str | Location, after: AfterSteps | None = None, purpose: str | None = None
) -> list[JournalResult]:
    """Finish every interrupted journal in folder (a rerun after a crash calls this first); with purpose, only
    the journals written for it (another's may need its own `after`)."""
    results = []
    for journal in pending_journals(folder):
        if purpose is not None and journal_purpose(journal) != purpose:
            continue
        log.warning("finishing the interrupted moves of %s", journal)
        results.append(run_journal(journal, after))
    return results


def journaled(
    folder: str | Location,
    roots: dict[str, str],
    steps: list[Step],
    purpose: str,
    meta: dict[str, str] | None = None,
    after: AfterSteps | None = None,
    *,
    ordered: bool = False,
) -> JournalResult | None:
    """Write the journal, carry it out (then `after`), remove it; None when there is nothing to do."""
    if not steps:
        return None
    return run_journal(write_journal(folder, roots, steps, purpose, meta, ordered=ordered), after)
