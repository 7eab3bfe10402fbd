"""`tidemark state repartition`: continue a stopped query's state with a different number of shuffle partitions.

Spark restores `spark.sql.shuffle.partitions` from the checkpoint on every restart, so a stateful query keeps
the count it started with. Repartitioning rewrites, at the latest committed batch, every state row of every
operator into the partition Spark will look it up in with N partitions (the JVM helper, through Spark's own
state store classes), copies the logs with N recorded, checks the result with Spark's own readers, and then
swaps it in. The old checkpoint is archived beside it, never deleted; `--to DIR` writes the new one elsewhere
and leaves the old one in place. Without `--apply` it only reads: operators, rows per old and new partition,
bytes, and where things would go.

Checkpoint format v2 (RocksDB files named `<version>_<id>`, the ids in the commit log's `stateUniqueIds`) stays
v2: each old partition is read by the id the latest commit names, each new partition is written with an id of
its own, and that commit is rewritten to name them (Spark loads the next version by the latest commit's ids).

Two engines write the new state. tidemark's own JVM writer (Spark 4.0+) is the default (`--engine auto`).
Spark's own offline repartition (`StreamingCheckpointManager.repartition`, 4.2+, RocksDB state in place only)
is taken with `--engine spark`: tidemark runs it on a copy, then verifies and swaps it in like its own.
benchmarks/repartition_vs_spark.py found both correct on every case Spark's supports, Spark's wrapped this way
1.0-2.0x slower; and Spark's writes an extra batch (latest + 1) that a file sink's log never gets, a gap that
`recover` refuses (the 4.2 smoke run). On Spark 3.5 neither exists: one line naming 4.0.

Join state format 4 (Spark 4.2+) is written by tidemark's writer only, on Spark 4.2 or newer (its key encoders are
4.2's: an older Spark cannot open the store); elsewhere one line naming 4.2, before Spark starts.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.compat import UTC, StrEnum
from tidemark.config.model import HDFS_PROVIDER, PROVIDER_CLASSES, PROVIDER_KEY, StateStoreKind
from tidemark.errors import CheckpointError, UsageError
from tidemark.evolve.partitioning import store_moves
from tidemark.evolve.verify import StateComparison, compare_state
from tidemark.formats import (
    JOIN_V4_STORES,
    SHUFFLE_PARTITIONS,
    Checkpoint,
    CommitEntry,
    MoveResult,
    StoreMove,
    claim_staging,
    clone_whole,
    clone_without_state,
    ensure_unlocked,
    finish_checkpoint_swaps,
    helper_spec,
    operator_entries,
    pending_checkpoint_swaps,
    pid_alive,
    record_unique_ids,
    release_staging,
    remove_abandoned_stagings,
    repoint_schema_paths,
    run_move,
    state_root,
    store_schemas,
    swap_in,
    swap_names,
)
from tidemark.spark.lines import Feature, has, lacking, require
from tidemark.steps import step
from tidemark.storage import Location, open_storage, parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.statestore.reader import StateSource

log = logging.getLogger(__name__)
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT_VERSION_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
ENCODING_KEY = "spark.sql.streaming.stateStore.encodingFormat"


@dataclass(frozen=True)
class StoreReport:
    """One store of one operator: its rows on each old partition and the keys each new partition gets."""

    operator_id: int
    operator: str
    store: str
    column_families: tuple[str, ...]
    rows_by_old_partition: tuple[int, ...]
    keys_by_new_partition: tuple[int, ...]
    approx_bytes: int  # key and value bytes as Spark encodes them
    disk_bytes: int  # the store's files at every version the old checkpoint keeps


class Engine(StrEnum):
    """What writes the repartitioned state."""

    AUTO = "auto"
    SPARK = "spark"  # Spark's own StreamingCheckpointManager.repartition (4.2+)
    TIDEMARK = "tidemark"  # tidemark's JVM writer (spark/jvm/TidemarkStateRewrite.scala)


@dataclass(frozen=True)
class RepartitionReport:
    """What a repartition did (or, as a dry run, would do)."""

    checkpoint: str
    batch: int  # the latest committed batch; the state written is its version (batch + 1)
    old_partitions: int
    new_partitions: int
    provider: str
    new_provider: str
    stores: tuple[StoreReport, ...]
    applied: bool
    new_checkpoint: str  # where the query continues: the checkpoint itself, or --to
    archive: str | None  # where the old checkpoint is (or will be) kept; None with --to (left in place)
    new_disk_bytes: int | None = None
    verification: StateComparison | None = None
    notes: tuple[str, ...] = ()
    engine: str = Engine.TIDEMARK.value

    @property
    def state_version(self) -> int:
        """The state version written, which the next batch loads."""
        return self.batch + 1


def _join_format_4(checkpoint: Checkpoint, moves: list[StoreMove]) -> bool:
    """Whether a join keeps join state format 4's column families (read off its store's schema file)."""
    for move in moves:
        if not (move.column_families and move.operator_name.lower().startswith("symmetrichashjoin")):
            continue
        try:
            families = {f.name for f in store_schemas(checkpoint, move.operator_id, move.store)}
        except ValueError as exc:
            msg = f"cannot read the state schema of {move.label}: {exc}"
            raise CheckpointError(msg) from exc
        if families & set(JOIN_V4_STORES):
            return True
    return False


def _refuse_unsupported(checkpoint: Checkpoint, conf: dict[str, str], *, join_format_4: bool) -> None:
    if conf.get(ENCODING_KEY, "unsaferow") != "unsaferow":
        # Spark's Avro state encoding frames keys and values its own way; the writer copies UnsafeRow bytes.
        msg = f"{checkpoint.uri} encodes state as {conf[ENCODING_KEY]}; repartition rewrites unsaferow state only"
        raise UsageError(msg)
    if join_format_4:
        # Its timestamp key encoders exist from Spark 4.2 on: an older Spark cannot read the store's schema file.
        require(Feature.JOIN_STATE_V4)


def _old_unique_ids(checkpoint: Checkpoint, commit: CommitEntry, move: StoreMove) -> list[str]:
    """Checkpoint format v2: the id of the store's files on each old partition, as the latest commit names them."""
    ids = commit.store_unique_ids(move.operator_id, move.unique_id_index)
    if ids is None:
        msg = (
            f"{checkpoint.uri} commits/{commit.batch} names no state file ids for {move.label} (checkpoint format "
            "v2): the commit log is incomplete; inspect it with 'tidemark checkpoint inspect'"
        )
        raise CheckpointError(msg)
    return ids


def _unique_ids(written: dict[int, dict[int, tuple[str | None, ...]]], partitions: int) -> dict[int, list[list[str]]]:
    """The new commit's stateUniqueIds: per operator, per new partition, one id per store in Spark's order."""
    result: dict[int, list[list[str]]] = {}
    for op, stores in written.items():
        per_store = [stores[index] for index in sorted(stores)]
        if any(len(ids) != partitions or None in ids for ids in per_store):
            msg = f"the state writer named no file id for some new partition of operator {op}; nothing was changed"
            raise CheckpointError(msg)
        result[op] = [[str(ids[p]) for ids in per_store] for p in range(partitions)]
    return result


def _check_loadable(checkpoint: Checkpoint, version: int, partitions: int) -> None:
    """Every store folder can load the version."""
    for (op, partition, store), scan in checkpoint.stores().items():
        if partition >= partitions:
            msg = (
                f"operator {op} has a folder for partition {partition} but the checkpoint records {partitions} "
                "partitions: it is inconsistent; inspect it with 'tidemark checkpoint inspect'"
            )
            raise CheckpointError(msg)
        if not scan.can_load(version):
            msg = (
                f"operator {op} partition {partition} store {store} cannot load state version {version} (files are "
                "missing): run 'tidemark checkpoint inspect' and repair it before repartitioning"
            )
            raise CheckpointError(msg)


def _store_disk_bytes(checkpoint: Checkpoint, move: StoreMove) -> int:
    return sum(
        scan.bytes
        for (op, _partition, store), scan in checkpoint.stores().items()
        if op == move.operator_id and store == move.store
    )


def _report(move: StoreMove, result: MoveResult, disk: int, old_partitions: int) -> StoreReport:
    by_partition = {p.partition: p.rows for p in result.read}
    return StoreReport(
        operator_id=move.operator_id,
        operator=move.operator_name,
        store=move.store,
        column_families=result.families,
        rows_by_old_partition=tuple(by_partition.get(i, 0) for i in range(old_partitions)),
        keys_by_new_partition=result.new_rows,
        approx_bytes=sum(p.bytes for p in result.read),
        disk_bytes=disk,
    )


def _misplaced(move: StoreMove, result: MoveResult, old_partitions: int) -> None:
    if result.misplaced:
        sample = next(p.misplaced_sample for p in result.read if p.misplaced)
        msg = (
            f"{move.label}: {result.misplaced} row(s) are not where Spark's hash of the grouping key puts them with "
            f"{old_partitions} partitions ({sample}); tidemark does not know this operator's partition key, "
            "so it will not move its state"
        )
        raise CheckpointError(msg)


def repartition_checkpoint(
    path: str,
    partitions: int,
    *,
    apply: bool = False,
    to: str | None = None,
    state_store: str | None = None,
    now: datetime | None = None,
    engine: Engine = Engine.AUTO,
) -> RepartitionReport:
    """Dry run (default) or apply a repartition of the checkpoint at path to `partitions` partitions."""
    from tidemark.statestore.reader import open_state_source, state_session

    if partitions < 1:
        msg = f"--partitions must be at least 1 (got {partitions})"
        raise UsageError(msg)
    require(Feature.STATE_REWRITE)  # one line naming the Spark whose state store API tidemark's writer uses
    location = _resolved(path)
    if to is None:
        _finish_or_refuse_swap(location, path, partitions, apply)
    checkpoint = Checkpoint.open(location.uri)
    checkpoint.require()
    ensure_unlocked(checkpoint.uri, checkpoint.store)
    archive, staging = swap_names(location, now or datetime.now(tz=UTC))
    notes: list[str] = []
    if apply and to is None:  # what a repartition killed before its swap staged beside the checkpoint
        removed, kept = remove_abandoned_stagings(location)
        notes += [f"removed {uri}, staged by a repartition killed before its swap" for uri in removed]
        notes += [f"left {uri}: staged by a repartition that may still run (another host, or alive)" for uri in kept]

    batch = checkpoint.latest_committed_batch()
    conf = checkpoint.offset(batch).conf
    entries = operator_entries(checkpoint)
    moves = store_moves(checkpoint, entries)
    join_format_4 = _join_format_4(checkpoint, moves)
    _refuse_unsupported(checkpoint, conf, join_format_4=join_format_4)
    commit = checkpoint.commit(batch)
    # Spark does not record the checkpoint format in the offset log: a v2 commit names the state files by id.
    checkpoint_format = max(commit.checkpoint_format, 2 if conf.get(FORMAT_VERSION_KEY, "1") == "2" else 1)
    recorded = conf.get(SHUFFLE_PARTITIONS)
    old_partitions = int(recorded) if recorded and recorded.isdigit() else None
    for move in moves:
        if move.partitions is not None and old_partitions is not None and move.partitions != old_partitions:
            msg = (
                f"{move.label} records {move.partitions} partitions but the offset log records {old_partitions}: "
                "the checkpoint is inconsistent"
            )
            raise CheckpointError(msg)
        old_partitions = old_partitions or move.partitions
    if old_partitions is None:
        msg = f"{checkpoint.uri} records no shuffle partition count in offsets/{batch}: it is not a Spark 3+ checkpoint"
        raise CheckpointError(msg)
    provider = conf.get(PROVIDER_KEY, HDFS_PROVIDER)
    kinds = [kind.value for kind in StateStoreKind]
    if state_store is not None and state_store not in kinds:
        msg = f"--state-store must be one of {', '.join(kinds)}"
        raise UsageError(msg)
    new_provider = PROVIDER_CLASSES[StateStoreKind(state_store)] if state_store else provider
    if partitions == old_partitions and new_provider == provider:
        msg = f"{checkpoint.uri} already has {partitions} shuffle partitions: nothing to do"
        raise UsageError(msg)
    if checkpoint_format == 2 and new_provider == HDFS_PROVIDER:
        msg = "checkpoint format v2 (state files named by unique ids) is RocksDB only: it cannot move to the HDFS store"
        raise UsageError(msg)
    in_families = next((m for m in moves if m.column_families), None)
    if new_provider == HDFS_PROVIDER and in_families is not None:
        msg = (
            f"{in_families.label} keeps its state in RocksDB column families (transformWithState, join state "
            "formats 3 and 4): it cannot move to the HDFS store"
        )
        raise UsageError(msg)
    version = batch + 1
    _check_loadable(checkpoint, version, old_partitions)

    target = _resolved(to) if to is not None else staging
    if to is not None:
        if target.relative_to(location) is not None:
            msg = f"--to {to} must be outside the checkpoint {location.uri}"
            raise UsageError(msg)
        if next(iter(open_storage(target).list_files("")), None) is not None:
            msg = f"--to {to} exists and is not empty: give a new folder"
            raise UsageError(msg)
    chosen = choose_engine(
        engine, apply=apply, to=to, provider=provider, new_provider=new_provider, conf=conf, join_format_4=join_format_4
    )
    read_conf = {**conf, FORMAT_VERSION_KEY: str(checkpoint_format)}
    write_conf = {**read_conf, PROVIDER_KEY: new_provider, CHANGELOG_KEY: "false"}
    if not moves:
        notes.append("the query keeps no state: only the recorded partition count changes")

    reports: list[StoreReport] = []
    new_ids: dict[int, dict[int, tuple[str | None, ...]]] = {}  # format v2: operator -> store index -> per partition
    verification: StateComparison | None = None
    new_disk: int | None = None
    # tidemark's writer and Spark's readers work on a local folder: the target itself on a local disk, else a
    # scratch folder whose verified result is uploaded to the target (formats/swap.py: why the swap is safe).
    with state_session(location.uri) as (spark, source), _local_work(target, apply) as work:
        new_root = state_root(work) if apply else None
        try:
            if apply and to is None and target.is_local:
                claim_staging(target)  # before the writer's first file (remove_abandoned_stagings)
            for move in moves:
                spec = helper_spec(
                    move,
                    old_state_root=state_root(source.root),
                    new_state_root=new_root if chosen is Engine.TIDEMARK else None,
                    version=version,
                    old_partitions=old_partitions,
                    new_partitions=partitions,
                    read_conf=read_conf,
                    write_conf=write_conf,
                    old_unique_ids=_old_unique_ids(checkpoint, commit, move) if checkpoint_format == 2 else None,
                )
                with step("rewriting the state for the new partition count"):
                    result = run_move(spark, spec)
                _misplaced(move, result, old_partitions)
                new_ids.setdefault(move.operator_id, {})[move.unique_id_index] = result.new_unique_ids
                reports.append(_report(move, result, _store_disk_bytes(checkpoint, move), old_partitions))
            if apply and chosen is Engine.SPARK:
                verification = _spark_repartition(spark, source, checkpoint, work, batch, partitions)
                _verified(verification, partitions, moves)
                notes.append(f"written by Spark's own offline repartition as batch {batch + 1}, verified by tidemark")
            elif apply:
                work.mkdir(parents=True, exist_ok=True)
                updates = {SHUFFLE_PARTITIONS: str(partitions), PROVIDER_KEY: new_provider}
                clone_without_state(checkpoint, open_storage(str(work)), updates, partitions)
                if checkpoint_format == 2 and moves:
                    record_unique_ids(open_storage(str(work)), batch, _unique_ids(new_ids, partitions))
                if moves:
                    verification = compare_state(spark, source, open_state_source(work), batch)
                    _verified(verification, partitions, moves)
            if apply:
                new_disk = sum(scan.bytes for scan in Checkpoint.open(str(work)).stores().values())
                if not target.is_local:
                    if to is None:
                        claim_staging(target)  # before its first file: a rerun after a kill knows it is abandoned
                    with step("uploading the new checkpoint"):
                        clone_whole(Checkpoint.open(str(work)), open_storage(target))
                # Spark 4 records transformWithState's schema files by absolute path: at the checkpoint's own place.
                repoint_schema_paths(open_storage(target), partitions, open_storage(location if to is None else target))
        except BaseException:
            if apply:
                _discard(target, location)  # only what this run wrote: the old checkpoint is untouched so far
                if to is None:
                    release_staging(target)
            raise
    if apply and to is None:
        swap_in(location, archive, staging)
        log.info("archived %s as %s", location.uri, archive.uri)
    return RepartitionReport(
        checkpoint=checkpoint.uri,
        batch=batch,
        old_partitions=old_partitions,
        new_partitions=partitions,
        provider=provider,
        new_provider=new_provider,
        stores=tuple(reports),
        applied=apply,
        new_checkpoint=target.uri if to is not None else checkpoint.uri,
        archive=None if to is not None else archive.uri,
        new_disk_bytes=new_disk,
        verification=verification,
        notes=tuple(notes),
        engine=chosen.value,
    )


def choose_engine(
    engine: Engine,
    *,
    apply: bool,
    to: str | None,
    provider: str,
    new_provider: str,
    conf: dict[str, str],
    spark_version: str | None = None,
    join_format_4: bool = False,
) -> Engine:
    """The engine that writes: Spark's where it does what tidemark's does, else tidemark's."""
    why_not = []
    if to is not None:
        why_not.append("--to writes elsewhere (Spark's writes in place)")
    if new_provider != provider:
        why_not.append("Spark's cannot change the state store")
    if "RocksDB" not in provider:
        why_not.append("Spark's supports RocksDB state only")
    if conf.get(FORMAT_VERSION_KEY, "1") != "1":
        why_not.append("checkpoint format v2")
    if join_format_4:
        # Spark 4.2.1's repartition of the recorded format 4 checkpoint ran, and its own reader then failed on the
        # result (INTERNAL_ERROR "Invalid byte array backed UnsafeRow"); tidemark's verification refused the swap.
        why_not.append("Spark's leaves join state format 4 that its own reader cannot read (Spark 4.2.1)")
    missing = lacking(Feature.OFFLINE_REPARTITION, spark_version)
    if missing is not None:
        why_not.append(missing)
    if engine is Engine.SPARK and why_not:
        msg = f"--engine spark cannot repartition this checkpoint: {why_not[0]}"
        raise UsageError(msg)
    if engine is Engine.AUTO:
        # tidemark's own writer wherever it runs (4.0+): Spark's writes an extra batch (latest + 1) that the
        # file sink's log never gets, so the sink log has a gap that `recover` refuses (and Spark's own sink-log
        # compaction reads every batch); and wrapped in the same copy-verify-swap it is slower (BENCHMARKS.md).
        if has(Feature.STATE_REWRITE, spark_version):
            return Engine.TIDEMARK
        return Engine.SPARK if apply and not why_not else Engine.TIDEMARK
    return engine


def _spark_repartition(
    spark: SparkSession, source: StateSource, checkpoint: Checkpoint, staging: Path, batch: int, partitions: int
) -> StateComparison:
    """Spark's offline repartition on a copy of the checkpoint (its new batch batch+1), compared with the original."""
    from tidemark.statestore.reader import open_state_source

    staging.mkdir(parents=True)
    clone_whole(checkpoint, open_storage(str(staging)))
    try:
        spark._streamingCheckpointManager.repartition(str(staging), partitions)  # type: ignore[attr-defined]
    except Exception as exc:  # Spark's own refusal or failure: one line, the copy removed by the caller
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"Spark's offline repartition failed: {first} (try --engine tidemark)"
        raise CheckpointError(msg) from exc
    # Spark's repartition leaves version-1 operator metadata (`state/<op>/_metadata/metadata`) recording the old
    # partition count (it updates only version 2): Spark's own state-metadata reader, and tidemark's next
    # repartition, would read the old count. tidemark records the new one, as its own writer does.
    repoint_schema_paths(open_storage(str(staging)), partitions, open_storage(str(staging)))
    return compare_state(spark, source, open_state_source(staging), batch, after_batch=batch + 1)


def _verified(comparison: StateComparison, partitions: int, moves: list[StoreMove]) -> None:
    for target in comparison.targets:
        if not target.same:
            msg = (
                f"the rewritten state differs from the original for operator {target.operator_id} {target.target}: "
                f"{target.rows_before} rows before, {target.rows_after} after, {target.only_before} only before, "
                f"{target.only_after} only after; nothing was changed"
            )
            raise CheckpointError(msg)
    for op in {m.operator_id for m in moves}:
        reported = comparison.partitions_after.get(op)
        if reported != partitions:
            msg = f"Spark's state-metadata reports {reported} partitions for operator {op}, not {partitions}"
            raise CheckpointError(msg)


def _resolved(path: str) -> Location:
    """A location as given; a local one made absolute (the swap names its parent)."""
    location = parse_location(path)
    return parse_location(str(Path(location.key).resolve())) if location.is_local else location


def _finish_or_refuse_swap(location: Location, path: str, partitions: int, apply: bool) -> None:
    """A repartition killed during its swap: --apply finishes it first (before the half-moved checkpoint is read);
    a dry run, which writes nothing, says so in one line."""
    if apply:
        finish_checkpoint_swaps(location)
        return
    pending = pending_checkpoint_swaps(location)
    if pending:
        msg = (
            f"a repartition of {location.uri} was interrupted during its swap ({pending[0]}): 'tidemark state "
            f"repartition {path} --partitions {partitions} --apply' (or 'tidemark run') finishes it first"
        )
        raise CheckpointError(msg)


@contextmanager
def _local_work(target: Location, apply: bool) -> Iterator[Path]:
    """Where the new checkpoint is written and verified: the target on a local disk, else a scratch folder
    (removed afterwards)."""
    if target.is_local or not apply:
        yield Path(target.key) if target.is_local else Path(tempfile.gettempdir()) / "unused"
        return
    from tidemark.cache import cache_root

    scratch = cache_root() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    _remove_dead_scratch(scratch)
    folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=scratch))
    try:
        yield folder / "checkpoint"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


SCRATCH_PREFIX = "repartition-"
_SCRATCH_NAME = re.compile(rf"^{SCRATCH_PREFIX}(?P<host>.+)-(?P<pid>\d+)-[^-]+$")


def scratch_owner(name: str) -> tuple[str, int] | None:
    """(host, process id) of the repartition that made a scratch folder of this name; None for another folder."""
    match = _SCRATCH_NAME.match(name)
    return (match["host"], int(match["pid"])) if match else None


def _remove_dead_scratch(scratch: Path) -> None:
    """Remove the scratch folders of repartitions killed on this host (SIGKILL, power loss: no `finally` ran):
    each is a whole new checkpoint. A folder whose process still runs, or of another host sharing the cache, stays."""
    here = socket.gethostname()
    for folder in scratch.glob(f"{SCRATCH_PREFIX}*"):
        owner = scratch_owner(folder.name)
        if owner is not None and owner[0] == here and not pid_alive(owner[1]):
            log.warning("removing %s, the scratch folder of a repartition killed before it finished", folder)
            shutil.rmtree(folder, ignore_errors=True)


def _discard(target: Location, checkpoint: Location) -> None:
    """Remove a failed repartition's new checkpoint (local or uploaded), never the checkpoint itself."""
    if target.same_place(checkpoint):
        return
    if target.is_local:
        shutil.rmtree(target.key, ignore_errors=True)
        return
    store = open_storage(target)
    rels = [entry.rel for entry in store.list_files("")]
    if rels:
        store.delete_files(rels)
