"""The landing-folder source (JSON, CSV, Parquet files): its stream and replay (source), what it still has to read
(backlog) and how a run catches up on it (catchup). Outside this package, import from here."""

from __future__ import annotations

from tidemark.sources.files.catchup import FileCatchUpPlan
from tidemark.sources.files.source import FilePosition, FileSource

__all__ = ["FileCatchUpPlan", "FilePosition", "FileSource"]
