"""Each commit's own actions in a Delta table's log (`_delta_log/<version>.json`), read by hand: which files a
commit added, under whose transaction (`txn`), by which operation.

The snapshot (active files, partition values, deletion vectors, transactions, protocol) comes from delta-rs
(sinks/delta/table.py); delta-rs does not expose single commits' actions, which `audit` and the rollback plan need
to tell this pipeline's batches from other writers' commits. The commit files are Delta's own JSON lines, whose
`add`/`remove`/`txn`/`commitInfo` actions keep their meaning under every feature the protocol gate admits
(sinks/delta/protocol.py). A log whose oldest commits were removed by Delta's log retention says from which
version it can answer (`oldest_commit`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tidemark.errors import CheckpointError
from tidemark.storage import Storage

DELTA_LOG_DIR = "_delta_log"
# The operations of the commit `tidemark recover --to-batch` makes: Delta's RESTORE carrying the pipeline's
# transaction set back to the batch it keeps (Delta's newest `txn` per app id wins on replay), or (earlier tidemark
# releases) a hand-written commit removing the undone batches' files.
ROLLBACK_OPERATIONS = frozenset({"RESTORE", "TIDEMARK ROLLBACK"})
_COMMIT = re.compile(r"^(\d{20})\.json$")
# Classic, multi-part and v2 (UUID-named, JSON or Parquet) checkpoints.
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.[0-9a-f-]{36})?\.(?:parquet|json)$")


@dataclass(frozen=True)
class AddedFile:
    """An `add` action: a data file below the table (its path decoded: the log keeps it URI-encoded), its size
    and (from its stats) its row count."""

    path: str
    size: int
    rows: int | None
    data_change: bool


@dataclass(frozen=True)
class DeltaCommit:
    """One commit of the log: its version, operation, the transaction it carries and the files it added/removed."""

    version: int
    operation: str | None
    app_id: str | None  # the `txn` action's appId (an idempotent writer's id), None without one
    txn_version: int | None
    added: tuple[AddedFile, ...]
    removed: tuple[str, ...]
    user_metadata: str | None
    timestamp_ms: int | None
    changes_data: bool = True  # False for a rearrangement (OPTIMIZE: every add and remove has dataChange false)

    @property
    def rows_added(self) -> int | None:
        """Rows the commit's added files hold, None when a file has no row count in its stats."""
        counts = [f.rows for f in self.added]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


@dataclass(frozen=True)
class CommitLog:
    """The commits still in a table's log, oldest first."""

    uri: str
    commits: tuple[DeltaCommit, ...]
    checkpoint_version: int | None = None  # the log's newest checkpoint (classic, multi-part or v2)

    @property
    def oldest_commit(self) -> int | None:
        """The oldest `<version>.json` still in the log (Delta's log retention removes older ones)."""
        return self.commits[0].version if self.commits else None


def has_log(table: Storage) -> bool:
    """True when the folder holds a Delta log with at least one commit or checkpoint."""
    listing = table.list_dir(DELTA_LOG_DIR)
    return listing is not None and any(_COMMIT.match(n) or _CHECKPOINT.match(n) for n, _ in listing.files)


def _log_names(table: Storage) -> list[str]:
    listing = table.list_dir(DELTA_LOG_DIR)
    return sorted(n for n, _ in listing.files) if listing is not None else []


def _json_lines(table: Storage, name: str) -> Iterator[dict[str, Any]]:
    data = table.read_bytes(f"{DELTA_LOG_DIR}/{name}")
    if data is None:  # removed by log cleanup between the listing and the read
        return
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            msg = f"{table.uri(DELTA_LOG_DIR + '/' + name)} line {number} is not JSON: the Delta log is damaged"
            raise CheckpointError(msg) from exc
        if isinstance(action, dict):
            yield action


def _rows_of(stats: object) -> int | None:
    if not isinstance(stats, str):
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) else None


def _added(action: dict[str, Any]) -> AddedFile:
    return AddedFile(
        path=unquote(str(action["path"])),
        size=int(action.get("size") or 0),
        rows=_rows_of(action.get("stats")),
        data_change=bool(action.get("dataChange", True)),
    )


def read_commit(table: Storage, version: int, name: str | None = None) -> DeltaCommit:
    """One commit's actions."""
    operation = app_id = user_metadata = None
    txn_version = timestamp = None
    added: list[AddedFile] = []
    removed: list[str] = []
    changes = False
    for action in _json_lines(table, name or f"{version:020d}.json"):
        if "commitInfo" in action:
            info = action["commitInfo"] or {}
            operation = info.get("operation")
            user_metadata = info.get("userMetadata")
            timestamp = info.get("timestamp")
        elif "txn" in action:
            app_id = str(action["txn"]["appId"])
            txn_version = int(action["txn"]["version"])
        elif "add" in action:
            added.append(_added(action["add"]))
            changes = changes or added[-1].data_change
        elif "remove" in action:
            removed.append(unquote(str(action["remove"]["path"])))
            changes = changes or bool(action["remove"].get("dataChange", True))
    return DeltaCommit(
        version, operation, app_id, txn_version, tuple(added), tuple(removed), user_metadata, timestamp, changes
    )


def read_commits(table: Storage) -> CommitLog:
    """Every commit still in the table's log, each with its own actions, and its newest checkpoint (one listing)."""
    names = _log_names(table)
    commits = sorted((int(m.group(1)), n) for n in names if (m := _COMMIT.match(n)))
    checkpoints = [int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n))]
    return CommitLog(
        table.uri(), tuple(read_commit(table, v, n) for v, n in commits), max(checkpoints) if checkpoints else None
    )
