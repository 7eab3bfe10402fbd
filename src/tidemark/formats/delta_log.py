"""A Delta Lake table's transaction log (`_delta_log/`), read without Spark: commits, checkpoints, transactions.

tidemark reads the log itself rather than through the `deltalake` package (delta-rs): it needs each commit's own
actions (which files a batch added, whose transaction it was, what operation), which delta-rs does not expose, and
it reads through tidemark's storage layer, so every scheme tidemark opens (wasbs:// included, which delta-rs does
not) works the same. The tests check this reader against delta-rs where delta-rs can answer.

What is read: `<version>.json` commits (one action per line: `commitInfo`, `txn`, `add`, `remove`, `metaData`,
`protocol`) and the newest classic checkpoint (`<version>.checkpoint.parquet`, or its `.<part>.<parts>.parquet`
pieces) for the transactions and active files that commits before it left. A log whose commits before the
newest checkpoint were removed by Delta's log retention still gives the snapshot; what single commits of that
period held is gone, and `commits` says from which version it can answer.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tidemark.errors import CheckpointError
from tidemark.storage import Storage

DELTA_LOG_DIR = "_delta_log"
# The operation of the commit `tidemark recover --to-batch` makes: it removes the files of the batches it undoes and
# sets the pipeline's transaction back to the batch it keeps (Delta's newest `txn` per app id wins on replay).
ROLLBACK_OPERATION = "TIDEMARK ROLLBACK"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


@dataclass(frozen=True)
class AddedFile:
    """An `add` action: a data file below the table (its path decoded: the log keeps it URI-encoded), its size
    and (from its stats) its row count."""

    path: str
    size: int
    rows: int | None
    data_change: bool
    log_path: str = ""  # the path as the log spells it (URI-encoded), what a `remove` of the file must repeat
    partition_values: tuple[tuple[str, str | None], ...] = ()


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

    @property
    def rows_added(self) -> int | None:
        """Rows the commit's added files hold, None when a file has no row count in its stats."""
        counts = [f.rows for f in self.added]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


@dataclass(frozen=True)
class DeltaSnapshot:
    """The table as its newest version shows it."""

    uri: str
    version: int | None  # None: no commit (not a Delta table yet)
    files: dict[str, AddedFile] = field(default_factory=dict)  # active files by path
    transactions: dict[str, int] = field(default_factory=dict)  # appId -> latest txn version
    checkpoint_version: int | None = None
    oldest_commit: int | None = None  # the oldest <version>.json still in the log
    commits: tuple[DeltaCommit, ...] = ()  # the commits read (read_snapshot's every_commit), oldest first

    @property
    def exists(self) -> bool:
        """True when the table has at least one commit."""
        return self.version is not None


def is_delta_table(table: Storage) -> bool:
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


def _partition_values(raw: object) -> tuple[tuple[str, str | None], ...]:
    """A commit's JSON map, or a checkpoint's Parquet map (pyarrow: a list of pairs)."""
    pairs = raw.items() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    return tuple((str(k), None if v is None else str(v)) for k, v in pairs)


def _added(action: dict[str, Any]) -> AddedFile:
    return AddedFile(
        path=unquote(str(action["path"])),
        size=int(action.get("size") or 0),
        rows=_rows_of(action.get("stats")),
        data_change=bool(action.get("dataChange", True)),
        log_path=str(action["path"]),
        partition_values=_partition_values(action.get("partitionValues")),
    )


def read_commit(table: Storage, version: int, name: str | None = None) -> DeltaCommit:
    """One commit's actions."""
    operation = app_id = user_metadata = None
    txn_version = timestamp = None
    added: list[AddedFile] = []
    removed: list[str] = []
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
        elif "remove" in action:
            removed.append(unquote(str(action["remove"]["path"])))
    return DeltaCommit(version, operation, app_id, txn_version, tuple(added), tuple(removed), user_metadata, timestamp)


def _read_checkpoint(table: Storage, parts: list[str]) -> tuple[dict[str, AddedFile], dict[str, int]]:
    import pyarrow.parquet as pq

    files: dict[str, AddedFile] = {}
    transactions: dict[str, int] = {}
    for name in parts:
        data = table.read_bytes(f"{DELTA_LOG_DIR}/{name}")
        if data is None:
            msg = f"{table.uri(DELTA_LOG_DIR + '/' + name)} went away while it was read: read the table again"
            raise CheckpointError(msg)
        frame = pq.read_table(io.BytesIO(data), columns=[c for c in ("add", "txn") if c in _columns(data)])
        for row in frame.to_pylist():
            add, txn = row.get("add"), row.get("txn")
            if add:
                added = _added(add)  # keyed by the decoded path, as the commits' actions are
                files[added.path] = added
            if txn:
                transactions[str(txn["appId"])] = int(txn["version"])
    return files, transactions


def _columns(data: bytes) -> set[str]:
    import pyarrow.parquet as pq

    return set(pq.read_schema(io.BytesIO(data)).names)


def read_snapshot(table: Storage, *, every_commit: bool = False) -> DeltaSnapshot:
    """The table's newest snapshot (no Spark, no delta-rs); with every_commit, every commit still in its log is
    read (audit), else only those after the newest checkpoint (what the snapshot needs)."""
    names = _log_names(table)
    commits = {int(m.group(1)): n for n in names if (m := _COMMIT.match(n))}
    checkpoints: dict[int, list[str]] = {}
    for name in names:
        match = _CHECKPOINT.match(name)
        if match:
            checkpoints.setdefault(int(match.group(1)), []).append(name)
    if not commits and not checkpoints:
        return DeltaSnapshot(table.uri(), None)
    base = max(checkpoints) if checkpoints else None
    files: dict[str, AddedFile] = {}
    transactions: dict[str, int] = {}
    if base is not None:
        files, transactions = _read_checkpoint(table, checkpoints[base])
    elif 0 not in commits:
        msg = f"{table.uri(DELTA_LOG_DIR)} has no checkpoint and no commit 0: the Delta log is incomplete"
        raise CheckpointError(msg)
    read = [read_commit(table, v, n) for v, n in sorted(commits.items()) if every_commit or base is None or v > base]
    for commit in read:
        if base is not None and commit.version <= base:
            continue
        for path in commit.removed:
            files.pop(path, None)
        for added in commit.added:
            files[added.path] = added
        if commit.app_id is not None and commit.txn_version is not None:
            transactions[commit.app_id] = commit.txn_version
    version = max([*commits, *(checkpoints or [])])
    return DeltaSnapshot(
        uri=table.uri(),
        version=version,
        files=files,
        transactions=transactions,
        checkpoint_version=base,
        oldest_commit=min(commits) if commits else None,
        commits=tuple(read),
    )


def write_rollback_commit(
    table: Storage,
    read_version: int,
    *,
    app_id: str,
    txn_version: int,
    files: Sequence[AddedFile],
    to_batch: int,
    now_ms: int,
) -> int:
    """Commit read_version + 1: remove files and set app_id's transaction back to txn_version. The commit file is
    created only if no other writer made that version first (put-if-absent, Delta's own rule for a commit)."""
    version = read_version + 1
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now_ms,
                "operation": ROLLBACK_OPERATION,
                "operationParameters": {"appId": app_id, "toBatch": str(to_batch), "txnVersion": str(txn_version)},
                "readVersion": read_version,
                "isBlindAppend": False,
                "userMetadata": f"tidemark recover --to-batch {to_batch}",
            }
        },
        {"txn": {"appId": app_id, "version": txn_version, "lastUpdated": now_ms}},
        *(
            {
                "remove": {
                    "path": f.log_path or f.path,
                    "deletionTimestamp": now_ms,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": dict(f.partition_values),
                    "size": f.size,
                }
            }
            for f in files
        ),
    ]
    data = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode("utf-8")
    if not table.write_atomic(f"{DELTA_LOG_DIR}/{version:020d}.json", data, exclusive=True):
        msg = (
            f"{table.uri(DELTA_LOG_DIR)}: another writer committed version {version} meanwhile: run the rollback again"
        )
        raise CheckpointError(msg)
    return version
