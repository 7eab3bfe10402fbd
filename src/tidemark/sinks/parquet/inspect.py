"""`checkpoint inspect --sink` on a file sink's folder: how big its `_spark_metadata` log has grown, and the entries
Spark's offline repartition left it without."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from tidemark.findings import Finding, Severity
from tidemark.sinks.base import SinkLimits
from tidemark.sinks.parquet.log import SINK_LOG_DIR, entries_in, log_files, skipped_batches
from tidemark.sizes import format_size
from tidemark.storage import Backend


@dataclass(frozen=True)
class SinkReport:
    """The file sink's `_spark_metadata` log."""

    path: str
    entries: int
    latest_batch: int | None
    latest_compact_batch: int | None
    compact_bytes: int
    files_in_compact: int
    bytes_total: int
    batches: list[int] = field(default_factory=list)  # the batch of every log file, in order

    def findings(self, limits: SinkLimits) -> list[Finding]:
        """SINK_METADATA_GROWTH when the compact log file is large."""
        too_big = self.compact_bytes > limits.max_log_compact_bytes
        too_many = self.files_in_compact > limits.max_log_files
        if not (too_big or too_many):
            return []
        message = (
            f"{self.path}/{SINK_LOG_DIR} compact file (batch {self.latest_compact_batch}) is "
            f"{format_size(self.compact_bytes)} and lists {self.files_in_compact:,} files; every compaction rewrites it"
        )
        fix = (
            "set the file sink option retention (e.g. .option('retention', '7d')) so old entries age out, or write "
            "new output to a new folder with a new checkpoint; readers of the folder also read this log"
        )
        return [Finding("SINK_METADATA_GROWTH", Severity.WARNING, message, fix)]

    def describe(self) -> list[tuple[str, str]]:
        """One line: entries, the newest batch and compaction."""
        latest = "-" if self.latest_batch is None else str(self.latest_batch)
        compact = "-" if self.latest_compact_batch is None else str(self.latest_compact_batch)
        return [
            (
                "sink log",
                f"{self.path}/{SINK_LOG_DIR}: {self.entries} entries, latest batch {latest}, compact {compact} "
                f"({format_size(self.compact_bytes)}, {self.files_in_compact:,} files)",
            )
        ]

    def missing_log_entries(self, repartitioned: Collection[int]) -> dict[int, str]:
        """The repartition batches the log skips while later batches have an entry, each with the entry to write."""
        gaps = skipped_batches(self.batches, self.latest_compact_batch, repartitioned)
        return {batch: f"{self.path}/{SINK_LOG_DIR}/{batch}" for batch in gaps}


def inspect_log(path: str, backend: Backend = "auto", spark: Any | None = None) -> SinkReport:
    """Summarise the log of a file sink's output folder (a CheckpointError when it has none)."""
    files = log_files(path, backend, spark)
    compacts = [f for f in files if f.compact]
    latest_compact = compacts[-1] if compacts else None
    return SinkReport(
        path=path,
        entries=len(files),
        latest_batch=files[-1].batch if files else None,
        latest_compact_batch=latest_compact.batch if latest_compact else None,
        compact_bytes=latest_compact.bytes if latest_compact else 0,
        files_in_compact=entries_in(path, latest_compact, backend, spark) if latest_compact else 0,
        bytes_total=sum(f.bytes for f in files),
        batches=[f.batch for f in files],
    )
