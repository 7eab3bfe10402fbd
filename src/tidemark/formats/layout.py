"""Names of things in a Spark checkpoint, its sink log and tidemark's own files; pure, no I/O.

Imported only inside formats/: everything else asks the format modules, never builds a path itself.
"""

from __future__ import annotations

from tidemark.compat import StrEnum

OFFSETS = "offsets"
COMMITS = "commits"
SOURCES = "sources"
STATE = "state"
METADATA = "metadata"
TIDEMARK_DIR = "_tidemark"
SCHEMA_DIR = "_stateSchema"
# Folders below state/<op>/ and state/<op>/<partition>/ that are not named stores: the store's own
# RocksDB files (SSTs/, logs/), metadata and schema folders.
NON_STORE_FOLDERS = frozenset({"SSTs", "logs", "_metadata", SCHEMA_DIR})
# RocksDB's files shared between versions of one store.
SHARED_FOLDERS = ("SSTs", "logs")
OPERATOR_METADATA_DIR = "_metadata"
# tidemark's own files inside a checkpoint.
LOCK_FILE = f"{TIDEMARK_DIR}/run.lock"
LEDGER_DIR = f"{TIDEMARK_DIR}/ledger"
JOURNAL_DIR = f"{TIDEMARK_DIR}/journal"
RECOVERY_MARKER = f"{TIDEMARK_DIR}/recovery.json"
SINK_TRANSACTION = f"{TIDEMARK_DIR}/sink-transaction.json"
# A table sink's rollback under way: written before the table's undo commit, removed once the checkpoint is rolled back.
SINK_ROLLBACK = f"{TIDEMARK_DIR}/sink-rollback.json"
# tidemark's own folders and files beside a checkpoint or a sink (not inside Spark's layout):
ARCHIVE_DIR = ".tidemark-archive"  # beside the sink (recover, rollback) or the checkpoint (state repartition)
RECOVERY_PLAN_FILE = "plan.json"  # in a recovery's archive folder: the plan it carried out
QUARANTINE_PREFIX = "batch-"  # quarantine/batch-<id:012>.jsonl (driver-written) or batch-<id:012>/ (executors)
QUARANTINE_SUFFIX = ".jsonl"
QUARANTINE_DONE_FILE = "_SUCCESS"  # in an executor-written batch folder, once every part file landed
QUARANTINE_MARKER = "_last_batch"  # the newest batch whose malformed records were written (or found to be none)


def quarantine_batch_name(batch_id: int) -> str:
    """The file a batch's malformed records go to, inside the quarantine folder."""
    return f"{QUARANTINE_PREFIX}{batch_id:012d}{QUARANTINE_SUFFIX}"


def quarantine_batch(name: str) -> int | None:
    """The batch id of a quarantine file or folder name, or None for anything else in that folder."""
    stem = name.removeprefix(QUARANTINE_PREFIX).removesuffix(QUARANTINE_SUFFIX)
    return int(stem) if name.startswith(QUARANTINE_PREFIX) and stem.isdigit() else None


# The checkpoint's parts that hold Spark's data (what the watchdog counts).
SPARK_PARTS = (OFFSETS, COMMITS, SOURCES, STATE)


def operator_folder(op_id: int) -> str:
    """state/<op>."""
    return f"{STATE}/{op_id}"


def operator_metadata_v1(op_id: int) -> str:
    """state/<op>/_metadata/metadata: an operator's metadata (Spark 4.0+)."""
    return f"{STATE}/{op_id}/{OPERATOR_METADATA_DIR}/metadata"


def operator_metadata_v2_dir(op_id: int) -> str:
    """state/<op>/_metadata/v2: transformWithState's metadata, one file per batch that wrote it."""
    return f"{STATE}/{op_id}/{OPERATOR_METADATA_DIR}/v2"


def is_operator_metadata_v2_dir(rel: str) -> bool:
    """True for a state/<op>/_metadata/v2 folder."""
    parts = rel.split("/")
    return len(parts) == 4 and parts[0] == STATE and parts[2] == OPERATOR_METADATA_DIR and parts[3] == "v2"


def schema_folder(op_id: int | str, store: str | None = None) -> str:
    """state/<op>/_stateSchema[/<store>]."""
    base = f"{STATE}/{op_id}/{SCHEMA_DIR}"
    return f"{base}/{store}" if store is not None else base


def log_entry(folder: str, batch: int) -> str:
    """offsets/<batch>, commits/<batch> or sources/<n>/<batch>."""
    return f"{folder}/{batch}"


def source_folder(source: int) -> str:
    """sources/<n>."""
    return f"{SOURCES}/{source}"


class FileKind(StrEnum):
    """What a file in a state store folder is."""

    STATE_DELTA = "delta"  # a state store version's delta file (HDFS-backed store), not Delta Lake
    SNAPSHOT = "snapshot"
    CHANGELOG = "changelog"
    ZIP = "zip"
    SST = "sst"
    CRC = "crc"
    OTHER = "other"


FILE_KINDS: tuple[FileKind, ...] = tuple(FileKind)
_VERSIONED = {
    "delta": FileKind.STATE_DELTA,
    "snapshot": FileKind.SNAPSHOT,
    "changelog": FileKind.CHANGELOG,
    "zip": FileKind.ZIP,
}
# A load starts from one of these and replays the others on top of it.
SNAPSHOT_KINDS = frozenset({FileKind.SNAPSHOT, FileKind.ZIP})
REPLAY_KINDS = frozenset({FileKind.STATE_DELTA, FileKind.CHANGELOG})


def classify(name: str) -> tuple[FileKind, int | None, str | None]:
    """Kind, state version and unique id (checkpoint format v2) of a state file name."""
    # Hadoop's ".x.crc", Spark 4.1's "x.crc" checksum files and their own ".x.crc.crc" all end so.
    if name.endswith(".crc"):
        return FileKind.CRC, None, None
    dot = name.rfind(".")
    if dot <= 0:
        return FileKind.OTHER, None, None
    kind = _VERSIONED.get(name[dot + 1 :])
    if kind is None:
        return (FileKind.SST if name.endswith(".sst") else FileKind.OTHER), None, None
    stem = name[:dot]
    cut = stem.find("_")
    number, unique_id = (stem, None) if cut < 0 else (stem[:cut], stem[cut + 1 :])
    if not number.isdigit():
        return FileKind.OTHER, None, None
    return kind, int(number), unique_id


def store_ids(rel: str) -> tuple[int, int, str] | None:
    """(operator, partition, store) of a store folder state/<op>/<partition>[/<store>], else None."""
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != STATE or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    rest = parts[3:]
    if len(rest) > 1 or (rest and rest[0] in NON_STORE_FOLDERS):
        return None
    return int(parts[1]), int(parts[2]), rest[0] if rest else "default"


def crc_companions(name: str) -> tuple[str, ...]:
    """Names of the checksum files Hadoop and Spark may write next to a file."""
    return (f".{name}.crc", f"{name}.crc", f".{name}.crc.crc")


def log_batch(name: str) -> int | None:
    """Batch id of an offsets/commits log file name, None for crc, temp and other files."""
    return int(name) if name.isdigit() else None


def log_file_batch(name: str) -> tuple[int, bool] | None:
    """Batch id and is-compact of a file name in one of Spark's compactible logs (a file source's `sources/<n>`, a
    file sink's log)."""
    if name.isdigit():
        return int(name), False
    if name.endswith(".compact") and name[: -len(".compact")].isdigit():
        return int(name[: -len(".compact")]), True
    return None
