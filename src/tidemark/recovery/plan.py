"""Plan a recovery from what the sink durably holds: the resume point, what moves aside, what is rewritten."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tidemark.compat import UTC
from tidemark.context import PipelineContext
from tidemark.formats import Checkpoint, CheckpointStatus, ensure_unlocked
from tidemark.recovery.archive import Move, MoveKind, plan_move
from tidemark.recovery.replay import EPOCH, check_replayable, describe_replay
from tidemark.sinks import AsideKind
from tidemark.storage import Location, open_storage
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


def plan_recovery(
    pipeline: PipelineContext,
    newest_event_time: datetime | None,
    *,
    per_key: bool = False,
    now: datetime | None = None,
) -> RecoveryPlan:
    """Work out the resume point and the moves; newest_event_time bounds the look-back (None: wall clock)."""
    check_replayable(pipeline)
    config = pipeline.config
    paths = pipeline.locations()
    ensure_not_running(paths.checkpoint)
    slide = config.aggregation.slide or config.aggregation.window
    assert slide is not None
    archive = paths.archive_for(now)
    # What the sink holds, read from it (a table's snapshot or rows, a file sink's committed files): the replay
    # resumes after its newest window. What moves aside of it is the sink's to say (a table keeps its own log,
    # which a lost checkpoint does not touch: nothing of it moves).
    target = pipeline.sink
    if per_key:
        target.check_per_key()  # before anything is read
    held = target.held_windows()
    newest_window = held.newest_start
    unclamped = None if newest_window is None else newest_window + slide
    if per_key:  # refused in one line by a sink whose files cannot move aside
        oldest_newest = target.newest_per_key(held, list(config.aggregation.key))
        unclamped = (oldest_newest + slide) if oldest_newest is not None else unclamped
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
    cut = target.recovery_cut(Checkpoint.open(paths.checkpoint), held, resume)
    notes.extend(cut.notes)
    moves: list[Move] = []
    state = checkpoint_state(paths.checkpoint)
    if state is not CheckpointStatus.MISSING:
        moves.append(plan_move(MoveKind.CHECKPOINT, paths.checkpoint, "", archive, "checkpoint"))
    for aside in cut.aside:
        folder = "sink-metadata" if aside.kind is AsideKind.LOG else "sink-partitions"
        moves.append(plan_move(MoveKind(aside.kind.value), paths.sink, aside.rel, archive, folder))
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
        committed_files=len(held.files),
        newest_committed_window=newest_window,
        newest_event_time=newest_event_time,
        resume_from=resume,
        unclamped_resume_from=unclamped,
        lost_windows=lost,
        replay=describe_replay(pipeline, resume),
        rewritten_from=resume,
        rewritten_until=until if until is None or until >= resume else None,
        surviving_files=cut.surviving,
        moves=tuple(moves),
        notes=tuple(notes),
        windows_read_from=held.read_from,
    )
