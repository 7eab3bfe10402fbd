"""What is at a location a command was pointed at: a checkpoint, or something else said in the user's words.

Tools that read a checkpoint refuse anything else in one line (exit 1) rather than reporting dashes and "no
findings" for a sink folder, an empty folder or a config file.
"""

from __future__ import annotations

from tidemark.errors import CheckpointError
from tidemark.formats.layout import COMMITS, METADATA, OFFSETS, STATE, TIDEMARK_DIR
from tidemark.storage import Storage

_HINT = "pass the folder the query was given as checkpointLocation"


def _interrupted_write(name: str) -> bool:
    """A temporary file of Spark's atomic write that a stop left behind (CheckpointFileManager writes
    `.<name>.<uuid>.tmp`, its `.crc` beside it, then renames it): a query killed while writing its metadata file
    leaves only these, and Spark ignores them."""
    return name.startswith(".") and name.endswith((".tmp", ".tmp.crc"))


def what_is_there(store: Storage, empty_ok: bool = False) -> str | None:
    """None when the location holds a streaming checkpoint (offsets/ or Spark's metadata file); else what it is.

    empty_ok: nothing there, or an empty folder, is fine too (a query about to start its checkpoint there).
    """
    uri = store.uri()
    if store.stat("") is not None:
        return f"{uri} is a file, not a checkpoint folder"
    listing = store.list_dir("")
    if listing is None:
        return None if empty_ok else f"{uri} does not exist"
    folders = set(listing.dirs)
    files = {name for name, _ in listing.files if not _interrupted_write(name)}
    if OFFSETS in folders or (METADATA in files and (COMMITS in folders or STATE in folders or len(files) == 1)):
        return None
    if not folders - {TIDEMARK_DIR} and not files:
        return None if empty_ok else f"{uri} is an empty folder, not a checkpoint"
    logs = sorted(d for d in folders if d.startswith("_") and d != TIDEMARK_DIR)
    if logs and (any(n.startswith("part-") for n in files) or any("=" in d for d in folders) or len(folders) == 1):
        # A query's output: a table's or a file sink's own log folder (an underscore name) beside its data
        return f"{uri} is a query's output folder (it has {logs[0]}/), not its checkpoint"
    shown = sorted([f"{d}/" for d in folders] + sorted(files))[:4]
    more = ", ..." if len(folders) + len(files) > len(shown) else ""
    return f"{uri} is not a streaming checkpoint (no {OFFSETS}/ folder; it holds {', '.join(shown)}{more})"


def refuse_foreign(store: Storage) -> None:
    """Raise a one-line CheckpointError when a location a query would start its checkpoint in holds something else
    (a sink's output, other files): Spark would write its logs among them."""
    problem = what_is_there(store, empty_ok=True)
    if problem is not None:
        msg = f"{problem}: point [checkpoint] location at the query's checkpoint or at a new folder"
        raise CheckpointError(msg)


def require_checkpoint(store: Storage, planned: bool = True) -> None:
    """Raise a one-line CheckpointError unless the location holds a streaming checkpoint.

    planned=False also accepts a query's checkpoint that has no planned batch yet (only Spark's metadata file).
    """
    problem = what_is_there(store)
    if problem is None and planned and not store.exists(OFFSETS):
        problem = f"{store.uri()} holds a query's metadata but no planned batch yet (no {OFFSETS}/)"
    if problem is not None:
        msg = f"{problem}: {_HINT}"
        raise CheckpointError(msg)
