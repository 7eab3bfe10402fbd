"""Typed results of `checkpoint inspect`: counts per folder, operator and store, the sink log, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.findings import Finding, Severity
from tidemark.sinks import SinkInspection
from tidemark.sources.kafka import KafkaSourceReport
from tidemark.storage import Walker


@dataclass(frozen=True)
class KindCount:
    """Files and bytes of one kind (or folder)."""

    files: int
    bytes: int


@dataclass(frozen=True)
class FolderCount:
    """Files and bytes under one top folder (offsets, commits, sources, state/<op>, ...)."""

    folder: str
    files: int
    bytes: int


@dataclass(frozen=True)
class StoreReport:
    """One partition's store: versions held, newest snapshot, and how much a load must replay."""

    partition: int
    store: str
    files: int
    bytes: int
    versions_held: int
    oldest_version: int | None
    latest_version: int | None
    newest_snapshot: int | None
    replay_on_load: int


@dataclass(frozen=True)
class OperatorReport:
    """One stateful operator (state/<id>)."""

    id: int
    name: str | None
    partitions: int
    store_names: list[str]  # the stores as folders (or `default`)
    files: int
    bytes: int
    files_by_kind: dict[str, KindCount]
    versions_held: int
    oldest_version: int | None
    latest_version: int | None
    max_replay_on_load: int
    stores: list[StoreReport] = field(default_factory=list)
    # Join state format 3+: the join's stores as column families of its one store (Spark's reader's store names).
    column_families: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CheckpointReport:
    """Everything `tidemark checkpoint inspect` reports about one checkpoint."""

    path: str
    query_id: str | None
    latest_offset_batch: int | None
    latest_committed_batch: int | None
    oldest_offset_batch: int | None
    oldest_committed_batch: int | None
    latest_offset_watermark: datetime | None
    latest_committed_watermark: datetime | None
    source_offsets: list[Any]
    state_provider: str | None
    checkpoint_format_version: int | None
    files_total: int
    bytes_total: int
    folders: list[FolderCount]
    operators: list[OperatorReport]
    sink: SinkInspection | None  # --sink: the sink connector's own report (a file sink's log, a Delta table)
    findings: list[Finding]
    # How the folders were listed: "native" (C), "python" (os.scandir fallback), "hadoop" (FileSystem API) or
    # "flat" (one paged listing of an object store prefix).
    walker: Walker
    list_requests: int = 0  # listing requests the walk made (pages, on object stores)
    offset_log_version: int | None = None  # of the newest offsets entry (v2: sources named)
    commit_log_version: int | None = None  # of the newest commit (v3: sinks named, Spark's sink evolution)
    source_names: list[str] = field(default_factory=list)  # offsets v2
    sink_names: list[str] = field(default_factory=list)  # commits v3, the active sink first
    kafka: KafkaSourceReport | None = None  # a Kafka source: each partition's committed offset (+ the broker's)

    @property
    def has_errors(self) -> bool:
        """True when a finding is an error (inspect then exits 1)."""
        return any(f.severity is Severity.ERROR for f in self.findings)
