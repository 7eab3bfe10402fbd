"""Which log formats a checkpoint's newest entries use that not every Spark line reads (check and the readers ask)."""

from __future__ import annotations

from tidemark.formats.checkpoint import Checkpoint
from tidemark.spark.lines import Feature


def log_features(checkpoint: Checkpoint) -> list[tuple[Feature, str]]:
    """COMMIT_LOG_V3 when the newest commit is a v3 entry; OFFSET_LOG_V2 when the newest offsets entry (the one a
    restart reads, planned or committed) is v2; each with the file that shows it. An unreadable entry answers
    nothing here (inspect's findings say what is wrong with it)."""
    found: list[tuple[Feature, str]] = []
    commits = checkpoint.commit_batches()
    try:
        commit = checkpoint.commit(commits[-1]) if commits else None
    except ValueError:
        commit = None
    if commit is not None and commit.log_version >= 3:
        found.append((Feature.COMMIT_LOG_V3, f"commits/{commits[-1]} is a v{commit.log_version} commit"))
    planned = checkpoint.offset_batches()
    try:
        offsets = checkpoint.offset(planned[-1]) if planned else None
    except ValueError:
        offsets = None
    if offsets is not None and offsets.version >= 2:
        found.append((Feature.OFFSET_LOG_V2, f"offsets/{planned[-1]} is a v{offsets.version} offsets entry"))
    return found
