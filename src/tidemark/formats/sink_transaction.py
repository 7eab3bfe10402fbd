"""tidemark's record, in a checkpoint, of how its batches name their writes to an idempotent sink (Delta Lake).

Batch b of the checkpoint writes with the sink's transaction (app id, `base + b`) into one table, named by its
location (any spelling of it) and, once it exists, its own id. The app id is the pipeline's
and outlives any checkpoint; `base` is chosen when the checkpoint starts writing (one past the newest version the
sink holds for that app id), so a re-run batch repeats its version (the sink skips it) and a new checkpoint never
repeats an old one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tidemark.errors import CheckpointError
from tidemark.formats.layout import SINK_ROLLBACK, SINK_TRANSACTION
from tidemark.storage import Storage


@dataclass(frozen=True)
class SinkTransaction:
    """The sink transaction a checkpoint writes with: batch b is version base + b of app_id, at table."""

    app_id: str
    base: int
    table: str
    table_id: str | None = None  # the table's own id (Delta's metaData.id) once it exists; None: not known yet

    def version_of(self, batch: int) -> int:
        """The transaction version batch `batch` writes with."""
        return self.base + batch

    def batch_of(self, version: int) -> int:
        """The batch that wrote a transaction version."""
        return version - self.base


def read_sink_transaction(checkpoint: Storage) -> SinkTransaction | None:
    """The checkpoint's sink transaction, None when it has none yet."""
    data = checkpoint.read_bytes(SINK_TRANSACTION)
    if data is None:
        return None
    try:
        body = json.loads(data)
        table_id = body.get("table_id")
        return SinkTransaction(
            str(body["app_id"]), int(body["base"]), str(body["table"]), None if table_id is None else str(table_id)
        )
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"{checkpoint.uri(SINK_TRANSACTION)} is damaged ({exc}): restore it from a copy of the checkpoint"
        raise CheckpointError(msg) from exc


def write_sink_transaction(checkpoint: Storage, transaction: SinkTransaction) -> None:
    """Keep the checkpoint's sink transaction (written before its first batch; again once the table's id is known)."""
    body: dict[str, object] = {"app_id": transaction.app_id, "base": transaction.base, "table": transaction.table}
    if transaction.table_id is not None:
        body["table_id"] = transaction.table_id
    checkpoint.write_atomic(SINK_TRANSACTION, json.dumps(body).encode("utf-8"))


def mark_sink_rollback(checkpoint: Storage, to_batch: int) -> None:
    """Say, before a table sink's undo commit, that the checkpoint is being rolled back to to_batch."""
    checkpoint.write_atomic(SINK_ROLLBACK, json.dumps({"to_batch": to_batch}).encode("utf-8"))


def read_sink_rollback(checkpoint: Storage) -> int | None:
    """The batch an unfinished rollback of a table sink goes back to, None when none is under way."""
    data = checkpoint.read_bytes(SINK_ROLLBACK)
    if data is None:
        return None
    try:
        return int(json.loads(data)["to_batch"])
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"{checkpoint.uri(SINK_ROLLBACK)} is damaged ({exc}): finish the rollback by running it again"
        raise CheckpointError(msg) from exc


def clear_sink_rollback(checkpoint: Storage) -> None:
    """The rollback is finished: the table and the checkpoint both end at its batch."""
    checkpoint.delete(SINK_ROLLBACK)
