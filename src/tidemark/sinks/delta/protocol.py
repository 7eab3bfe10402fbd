"""Which Delta tables tidemark vouches for: the protocol gate every tool passes before it reads or writes a table.

tidemark appends through Delta's own Spark writer (which checks the protocol itself), reads the snapshot through
delta-rs (which refuses a reader feature it does not know) and rolls back through Delta's RESTORE. What it reads
by hand is each commit's own actions (sinks/delta/log.py: `add`, `remove`, `txn`, `commitInfo`); the features
below leave those actions' meaning as it reads them. A feature not listed may change it (a commit kept in a
catalog instead of `_delta_log/`, a new action kind): such a table is refused in one line, before anything is
written, rather than vouched for by a guess.
"""

from __future__ import annotations

from tidemark.errors import UsageError
from tidemark.sinks.delta.table import Protocol

# Reader features (protocol reader version 3): delta-rs applies them on read; the commits' actions keep their meaning.
READER_FEATURES = frozenset(
    {
        "columnMapping",  # physical column names in the files; tidemark reads through delta-rs, paths are unchanged
        "deletionVectors",  # rows removed without rewriting: applied by delta-rs, carried by `add` actions
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",  # UUID-named checkpoints with sidecars: delta-rs reads them; commits are unchanged
        "vacuumProtocolCheck",
    }
)
# Writer features (protocol writer version 7) that a tidemark write or rollback keeps: Delta's own writer and RESTORE
# honour them, and tidemark's own commit reading is unaffected.
WRITER_FEATURES = READER_FEATURES | frozenset(
    {
        "appendOnly",  # tidemark only appends; a rollback is refused (it would remove files)
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "domainMetadata",
        "rowTracking",
        "inCommitTimestamp",  # the commit's time moves into commitInfo; tidemark reads no time from the log
        "clustering",
        "icebergCompatV1",
        "icebergCompatV2",
        "allowColumnDefaults",
    }
)
# Before named features: reader version 1-2 and writer version 1-6 are fully known.
NAMED_FROM_READER = 3
NAMED_FROM_WRITER = 7
KNOWN_READER = 3
KNOWN_WRITER = 7


def unsupported(protocol: Protocol) -> tuple[str, ...]:
    """The table's features (or protocol versions) tidemark does not vouch for; empty when it does."""
    found: list[str] = []
    if protocol.min_reader > KNOWN_READER:
        found.append(f"reader version {protocol.min_reader}")
    if protocol.min_writer > KNOWN_WRITER:
        found.append(f"writer version {protocol.min_writer}")
    if protocol.min_reader >= NAMED_FROM_READER:
        found.extend(f for f in protocol.reader_features if f not in READER_FEATURES)
    if protocol.min_writer >= NAMED_FROM_WRITER:
        found.extend(f for f in protocol.writer_features if f not in WRITER_FEATURES and f not in found)
    return tuple(found)


def require_supported(path: str, protocol: Protocol, doing: str) -> None:
    """One line (exit 2) when tidemark does not vouch for the table's protocol; nothing was written yet."""
    features = unsupported(protocol)
    if features:
        msg = (
            f"the Delta table {path} uses {', '.join(features)}, which tidemark does not vouch for: it will not "
            f"{doing} (nothing was written). docs/delta.md lists the features it handles"
        )
        raise UsageError(msg)
