"""Plan a recovery from what the sink durably holds: the resume point, what moves aside, what is rewritten."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig
from tidemark.errors import UsageError
from tidemark.formats import (
    Checkpoint,
    CheckpointStatus,
    ensure_unlocked,
    partition_start,
    read_sink_log,
    sink_data_files,
    sink_log_folder,
    with_checksums,
)
from tidemark.recovery.archive import (
    Move,
    MoveKind,
    pipeline_locations,
    plan_move,
)
from tidemark.recovery.replay import EPOCH, check_replayable, describe_replay
from tidemark.sinks import sink_of
from tidemark.storage import Location, Storage, open_storage
from tidemark.storage.journal import pending_journals


@dataclass(frozen=True)
class RecoveryPlan:
    """What `tidemark recover` will do: nothing happens until it is applied."""

    pipeline: str
    checkpoint: str
    checkpoint_state: CheckpointStatus
    sink: str
    archive: str
    per_key: bool
    committed_files: int
    newest_committed_window: datetime | None
    newest_event_time: datetime | None
    resume_from: datetime
    unclamped_resume_from: datetime | None
    lost_windows: int  # window starts between the unclamped and the clamped resume point
    replay: str
    rewritten_from: datetime
    rewritten_until: datetime | None  # the newest window start the landing data reaches
    surviving_files: tuple[str, ...]
    moves: tuple[Move, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    source_offsets: str | None = None  # Kafka: the replay's per-partition start offsets (Spark's JSON)
    windows_read_from: str = ""  # how the sink's windows were read (a table's partition values or rows, a log)

    def to_json(self) -> str:
        """The plan as JSON (kept in the archive, so an interrupted recovery can be resumed)."""
        data = dataclasses.asdict(self)
        for name, value in data.items():
            if isinstance(value, datetime):
                data[name] = value.isoformat()
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RecoveryPlan:
        """Read a plan written by to_json."""
        data = json.loads(text)
        for name in _DATETIME_FIELDS:
            if data.get(name) is not None:
                data[name] = datetime.fromisoformat(data[name])
        data["checkpoint_state"] = CheckpointStatus(data["checkpoint_state"])
        data["moves"] = tuple(Move(MoveKind(m["kind"]), m["source"], m["target"]) for m in data["moves"])
        for name in ("surviving_files", "notes"):
            data[name] = tuple(data[name])
        return cls(**data)

    @property
    def clamped(self) -> bool:
        """True when max_lookback moved the resume point later (windows in between are not rewritten)."""
        return self.lost_windows > 0


_DATETIME_FIELDS = (
    "newest_committed_window",
    "newest_event_time",
    "resume_from",
    "unclamped_resume_from",
    "rewritten_from",
    "rewritten_until",
)


def floor_to_grid(when: datetime, step: timedelta) -> datetime:
    """The newest grid point (epoch-aligned, like Spark's windows) at or before when."""
    return when - (when - EPOCH) % step


def ceil_to_grid(when: datetime, step: timedelta) -> datetime:
    """The oldest grid point at or after when."""
    floor = floor_to_grid(when, step)
    return floor if floor == when else floor + step


def checkpoint_state(checkpoint: Location) -> CheckpointStatus:
    """Missing, empty (no planned batch) or present."""
    return Checkpoint.open(checkpoint).status()


def ensure_not_running(checkpoint: Location) -> None:
    """Refuse to touch a checkpoint a live run holds: tidemark's lock, or a plain Spark job mid-batch on it."""
    ensure_unlocked(checkpoint.uri)


def _newest_per_key(files: list[str], sink: Storage, keys: list[str]) -> dict[tuple[object, ...], datetime]:
    import pyarrow.parquet as pq

    filesystem, base = sink.arrow()
    newest: dict[tuple[object, ...], datetime] = {}
    for file in files:
        start = partition_start(file)
        if start is None:
            continue
        table = pq.read_table(f"{base}/{file}", columns=keys, partitioning=None, filesystem=filesystem)
        for row in zip(*(table.column(k).to_pylist() for k in keys), strict=True):
            if row not in newest or newest[row] < start:
                newest[row] = start
    return newest


def plan_recovery(
    config: TidemarkConfig,
    newest_event_time: datetime | None,
    *,
    per_key: bool = False,
    now: datetime | None = None,
) -> RecoveryPlan:
    """Work out the resume point and the moves; newest_event_time bounds the look-back (None: wall clock)."""
    check_replayable(config)
    paths = pipeline_locations(config)
    ensure_not_running(paths.checkpoint)
    slide = config.aggregation.slide or config.aggregation.window
    assert slide is not None
    archive = paths.archive_for(now)
    sink = open_storage(paths.sink)
    # What the sink holds, read from it (a table's snapshot or rows, a file sink's committed files): the replay
    # resumes after its newest window. A table sink (Delta) keeps its own log, which a lost checkpoint does not
    # touch: nothing in it moves (windows from the resume point on are not in it).
    target = sink_of(config)
    table = target.table_output(open_storage(paths.checkpoint))
    if table is not None and per_key:
        msg = (
            "--per-key rewrites windows some keys already have, which a Delta sink cannot take back (its files do not "
            "move aside): recover without --per-key"
        )
        raise UsageError(msg)
    held = target.held_windows()
    no_output = Checkpoint.open(paths.checkpoint).repartition_batches  # batches the sink log may skip
    log = read_sink_log(sink, empty=no_output) if table is None else None
    listed = {e.rel for e in sink.list_files()} if table is None else set(held.files)
    committed = list(held.files)
    newest_window = held.newest_start
    unclamped = None if newest_window is None else newest_window + slide
    if per_key and newest_window is not None:
        per = _newest_per_key(committed, sink, list(config.aggregation.key))
        unclamped = (min(per.values()) + slide) if per else unclamped
    reference = newest_event_time or now or datetime.now(tz=UTC)
    floor = ceil_to_grid(reference - config.checkpoint.max_lookback, slide)
    notes: list[str] = []
    pending = pending_journals(paths.archive_base)
    if pending:
        notes.append(
            f"{len(pending)} interrupted move(s) wait in {paths.archive_base}: --apply finishes them first, "
            "and this plan is then made again"
        )
    if unclamped is None:
        resume = floor if newest_event_time is not None else EPOCH
        notes.append("the sink holds no committed window: the replay starts max_lookback before the newest event")
        lost = 0
    else:
        resume = max(unclamped, floor)
        lost = int((resume - unclamped) / slide) if resume > unclamped else 0
        if lost:
            notes.append(
                f"max_lookback ({config.checkpoint.max_lookback}) clamps the replay: {lost} window start(s) from "
                f"{unclamped.isoformat()} to {(resume - slide).isoformat()} will NOT be rewritten"
            )
    missing = len(log.files) - len(committed) if log is not None else 0
    if missing:
        notes.append(f"{missing} file(s) the sink log lists are gone from disk; Spark readers would fail on them")
    moves: list[Move] = []
    state = checkpoint_state(paths.checkpoint)
    if state is not CheckpointStatus.MISSING:
        moves.append(plan_move(MoveKind.CHECKPOINT, paths.checkpoint, "", archive, "checkpoint"))
    log_folder = sink_log_folder(sink) if table is None else None
    if log_folder is not None and any(rel.startswith(f"{log_folder}/") for rel in listed):
        moves.append(plan_move(MoveKind.SINK_METADATA, paths.sink, log_folder, archive, "sink-metadata"))
    live = set(committed)
    surviving: list[str] = list(committed) if table is not None else []
    for file in sink_data_files(sink) if table is None else ():
        start = partition_start(file.rel)
        if file.rel not in live:
            kind = MoveKind.FAILED_BATCH_FILE
        elif start is not None and start >= resume:
            kind = MoveKind.REWRITTEN_PARTITION_FILE
        else:
            surviving.append(file.rel)
            continue
        rels = with_checksums(file.rel, listed)
        moves.extend(plan_move(kind, paths.sink, f, archive, "sink-partitions") for f in rels)
    if open_storage(paths.quarantine).exists(""):
        moves.append(plan_move(MoveKind.QUARANTINE, paths.quarantine, "", archive, "quarantine"))
        notes.append("the quarantine folder moves aside too: the replay re-quarantines malformed lines")
    until = floor_to_grid(newest_event_time, slide) if newest_event_time is not None else None
    return RecoveryPlan(
        pipeline=config.pipeline.name,
        checkpoint=paths.checkpoint.uri,
        checkpoint_state=state,
        sink=paths.sink.uri,
        archive=archive.uri,
        per_key=per_key,
        committed_files=len(committed),
        newest_committed_window=newest_window,
        newest_event_time=newest_event_time,
        resume_from=resume,
        unclamped_resume_from=unclamped,
        lost_windows=lost,
        replay=describe_replay(config, resume),
        rewritten_from=resume,
        rewritten_until=until if until is None or until >= resume else None,
        surviving_files=tuple(surviving),
        moves=tuple(moves),
        notes=tuple(notes),
        windows_read_from=held.read_from,
    )
