"""`checkpoint inspect`: read a checkpoint's logs and files and report what it holds and what is wrong."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig
from tidemark.config.provider import PROVIDER_KEY
from tidemark.doctor.corruption import RestartPoint
from tidemark.doctor.findings import FindingsInput, Thresholds, find_problems
from tidemark.doctor.report import (
    CheckpointReport,
    FolderCount,
    KindCount,
    OperatorReport,
    StoreReport,
)
from tidemark.errors import UsageError
from tidemark.findings import Finding, Severity
from tidemark.formats import (
    SHUFFLE_PARTITIONS,
    Checkpoint,
    CheckpointScan,
    CommitEntry,
    FileKind,
    OperatorMetadata,
    OperatorScan,
    check_newest_state,
    join_families,
    keyless_operator,
    read_health,
    read_source_logs,
)
from tidemark.formats.kafka_offsets import Offsets
from tidemark.sinks import SinkInspection, reader_of
from tidemark.sources import ReportsLag, source_of
from tidemark.sources.kafka import KafkaSourceReport, kafka_findings, kafka_report
from tidemark.storage import Backend, open_storage

log = logging.getLogger(__name__)


def read_commits(checkpoint: Checkpoint, scan: CheckpointScan) -> dict[int, CommitEntry]:
    """The latest commit, plus every commit when the checkpoint uses format v2 (unique ids per version)."""
    if not scan.commit_batches:
        return {}
    latest = checkpoint.find_commit(scan.commit_batches[-1])
    if latest is None:
        return {}
    if not latest.state_unique_ids:
        return {latest.batch: latest}
    return {b: c for b in scan.commit_batches if (c := checkpoint.find_commit(b)) is not None}


def _watermark(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


def _operator_report(
    op: OperatorScan, meta: OperatorMetadata | None, load_version: int | None, families: tuple[str, ...] = ()
) -> OperatorReport:
    stores = []
    all_versions: set[int] = set()
    for (partition, name), store in sorted(op.stores.items()):
        versions = store.versions
        all_versions.update(versions)
        target = load_version if load_version is not None else (max(versions) if versions else None)
        base = store.newest_snapshot(at_most=target)
        stores.append(
            StoreReport(
                partition=partition,
                store=name,
                files=store.files,
                bytes=store.bytes,
                versions_held=len(versions),
                oldest_version=min(versions) if versions else None,
                latest_version=max(versions) if versions else None,
                newest_snapshot=base,
                replay_on_load=store.replay_after(base, target) if target is not None else 0,
            )
        )
    store_names = sorted({s.store for s in stores})
    if meta is not None and meta.store_names:
        store_names = list(dict.fromkeys([*meta.store_names, *store_names]))
    partitions = len({s.partition for s in stores})
    return OperatorReport(
        id=op.id,
        name=meta.name if meta else None,
        partitions=max(partitions, meta.partitions or 0) if meta else partitions,
        store_names=store_names,
        column_families=list(families),
        files=op.files,
        bytes=op.bytes,
        files_by_kind={kind.value: KindCount(*op.kinds[kind]) for kind in FileKind},
        versions_held=len(all_versions),
        oldest_version=min(all_versions) if all_versions else None,
        latest_version=max(all_versions) if all_versions else None,
        max_replay_on_load=max((s.replay_on_load for s in stores), default=0),
        stores=stores,
    )


def _short_provider(conf: dict[str, str]) -> str | None:
    provider = conf.get(PROVIDER_KEY)
    return provider.rsplit(".", 1)[-1] if provider else None


def _kafka(checkpoint: Checkpoint, source: TidemarkConfig | None) -> KafkaSourceReport | None:
    """The Kafka offsets the checkpoint holds and, with a source config, the broker's for each partition."""
    report = kafka_report(checkpoint)
    if source is None:
        return report
    reader = source_of(source)
    if not isinstance(reader, ReportsLag):
        msg = f"--source compares with a Kafka or Event Hubs source; this config reads {reader.format.value!r}"
        raise UsageError(msg)
    earliest, end, endpoint = server_offsets(source, reader)
    return kafka_report(checkpoint, earliest, end, endpoint)


def server_offsets(config: TidemarkConfig, source: ReportsLag) -> tuple[Offsets, Offsets, str]:
    """(earliest, end, endpoint) of every partition the source subscribes to, asked of its server (a broker:
    through Kafka's admin client in a small local JVM, jars from tidemark's lock)."""
    from tidemark.needs import kafka_session

    with kafka_session(config) as spark:
        return source.live_offsets(spark)


def _repartition_findings(checkpoint: Checkpoint, committed: list[int], sink: SinkInspection | None) -> list[Finding]:
    """Each batch Spark's offline state repartition (4.2+) committed: it read no input and wrote no output, and
    it gives a file sink's log no entry, so once a later batch writes one, every Spark reader of the sink fails
    (`IllegalStateException: .../<the log>/<b> doesn't exist (latestId: ...)`, seen on 4.1 reading the 4.2.1
    recording) and so does the sink log's next compaction, which reads every batch since the last one."""
    found = []
    repartitioned = checkpoint.repartition_batches(committed)
    gaps = sink.missing_log_entries(repartitioned) if sink is not None else {}
    for batch, (old, new) in sorted(repartitioned.items()):
        message = (
            f"batch {batch} was written by Spark's offline state repartition ({old} -> {new} shuffle partitions): "
            "it read no input and wrote no output"
        )
        entry = gaps.get(batch)
        if entry is not None and sink is not None:
            found.append(
                Finding(
                    "SINK_LOG_GAP",
                    Severity.ERROR,
                    f"{message}, and the file sink's log has no entry for it while later batches have one",
                    f"write {entry} holding the single line 'v1' (the entry of a batch with no output) with the "
                    "query stopped; tidemark's own `state repartition` (its default engine) leaves no such gap",
                    "offsets",
                    f"every Spark reader of {sink.path} fails ({entry} doesn't exist), and so will the query at its "
                    "next sink log compaction",
                )
            )
            continue
        impact = (
            "none for the query; with a file sink (Parquet and its log) its log gets no entry for this batch, and "
            "once a later batch writes one, Spark's readers of the sink fail (inspect with --sink checks)"
        )
        fix = "nothing before the next batch; run `checkpoint inspect --sink` afterwards with a file sink"
        found.append(Finding("SPARK_REPARTITION_BATCH", Severity.INFO, message, fix, "offsets", impact))
    return found


def inspect_checkpoint(
    path: str,
    sink: str | None = None,
    thresholds: Thresholds | None = None,
    backend: Backend = "auto",
    spark: Any | None = None,
    source: TidemarkConfig | None = None,
) -> CheckpointReport:
    """Read a checkpoint (Spark 3.5/4.x, HDFS-backed or RocksDB, format v1/v2) and report what it holds.

    source: the pipeline config of a Kafka source, to compare the committed offsets with the broker's (lag,
    offsets already expired); this connects to the broker.
    """
    thresholds = thresholds or Thresholds()
    checkpoint = Checkpoint.open(path, backend, spark)
    checkpoint.require(planned=False)
    scan = checkpoint.scan()
    # Every log entry and the metadata file read as Spark reads them: damaged ones become findings, not warnings.
    health = read_health(checkpoint, scan)
    parsed_offsets = health.offsets.offsets
    latest_offset = parsed_offsets[max(parsed_offsets)] if parsed_offsets else None
    commits = health.commits.commits
    latest_commit = commits.get(scan.commit_batches[-1]) if scan.commit_batches else None
    load_version = latest_commit.batch + 1 if latest_commit else None
    metas = {op_id: checkpoint.operator_metadata(op_id) for op_id in scan.operators}
    operators = []
    for op_id, op in sorted(scan.operators.items()):
        meta = metas[op_id]
        families = join_families(checkpoint, op_id, meta.properties) if meta else ()
        operators.append(_operator_report(op, meta, load_version, families))
    folders = [FolderCount(name, files, size) for name, (files, size) in sorted(scan.folders.items())]
    # --sink: the connector whose format the folder holds reads it (a file sink's log, a Delta table).
    sink_report = reader_of(open_storage(sink)).inspect_folder(sink, checkpoint.store, backend, spark) if sink else None
    point = RestartPoint.of(health)
    state_problems = []
    if point.state_version is not None:
        unique_ids = latest_commit.state_unique_ids if latest_commit else {}
        state_problems = check_newest_state(checkpoint, scan, point.state_version, unique_ids)
    partitions = latest_offset.conf.get(SHUFFLE_PARTITIONS) if latest_offset else None
    kafka = _kafka(checkpoint, source)
    findings = (
        find_problems(
            FindingsInput(
                scan=scan,
                operators=operators,
                folders=folders,
                commits=commits,
                metadata_partitions={i: m.partitions for i, m in metas.items() if m is not None and m.partitions},
                sink=sink_report,
                health=health,
                state_problems=state_problems,
                source_problems=read_source_logs(checkpoint),
                conf_partitions=int(partitions) if partitions and partitions.isdigit() else None,
                store_names={i: m.store_names for i, m in metas.items() if m is not None},
                single_partition=frozenset(
                    i for i, m in metas.items() if keyless_operator(checkpoint, i, m.name if m is not None else None)
                ),
            ),
            thresholds,
        )
        + kafka_findings(kafka)
        + _repartition_findings(checkpoint, scan.commit_batches, sink_report)
    )
    return CheckpointReport(
        path=path,
        query_id=health.query_id,
        latest_offset_batch=scan.offset_batches[-1] if scan.offset_batches else None,
        latest_committed_batch=scan.commit_batches[-1] if scan.commit_batches else None,
        oldest_offset_batch=scan.offset_batches[0] if scan.offset_batches else None,
        oldest_committed_batch=scan.commit_batches[0] if scan.commit_batches else None,
        latest_offset_watermark=_watermark(latest_offset.watermark_ms) if latest_offset else None,
        latest_committed_watermark=_watermark(latest_commit.next_watermark_ms) if latest_commit else None,
        source_offsets=latest_offset.source_offsets if latest_offset else [],
        state_provider=_short_provider(latest_offset.conf) if latest_offset else None,
        checkpoint_format_version=latest_commit.checkpoint_format if latest_commit else None,
        offset_log_version=latest_offset.version if latest_offset else None,
        commit_log_version=latest_commit.log_version if latest_commit else None,
        source_names=list(latest_offset.source_names) if latest_offset else [],
        sink_names=[s.name for s in sorted(latest_commit.sinks, key=lambda s: not s.active)] if latest_commit else [],
        files_total=scan.files_total,
        bytes_total=scan.bytes_total,
        folders=folders,
        operators=operators,
        sink=sink_report,
        findings=findings,
        walker=checkpoint.store.walker,
        list_requests=checkpoint.store.list_requests,
        kafka=kafka,
    )
