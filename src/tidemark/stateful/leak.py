"""The leak guard: warns when an operator's state keeps growing while the watermark advances."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LEAK_CODE = "STATE_LEAK"


@dataclass(frozen=True)
class LeakWarning:
    """One operator whose state rows grew across N consecutive batches while the watermark advanced."""

    operator_index: int
    operator_name: str
    batch_id: int
    batches: int
    rows_before: int
    rows_now: int
    watermark: str
    code: str = LEAK_CODE
    severity: str = "warning"

    @property
    def message(self) -> str:
        """One line naming the operator, the batches and the growth."""
        return (
            f"state of operator {self.operator_index} ({self.operator_name}) grew in {self.batches} consecutive "
            f"batches up to batch {self.batch_id} ({self.rows_before} -> {self.rows_now} rows) while the watermark "
            f"advanced to {self.watermark}: keys that stop receiving events are probably never removed"
        )

    @property
    def fix(self) -> str:
        """What to do about it."""
        return (
            "remove each key's state when it expires: set an expiry (ctx.expire_at / idle_timeout) "
            "and do not call ctx.keep() unconditionally in on_expire, or set a processing-time ttl"
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeakWarning:
        """Rebuild a warning from its JSON form (as written by print_json)."""
        fields = ("operator_index", "operator_name", "batch_id", "batches", "rows_before", "rows_now", "watermark")
        return cls(**{name: data[name] for name in fields})


@dataclass
class _OperatorTrack:
    rows: int
    watermark: datetime | None
    streak_start_rows: int
    streak: int = 0
    warned: bool = False


def _parse_watermark(progress: dict[str, Any]) -> datetime | None:
    value = (progress.get("eventTime") or {}).get("watermark")
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass
class LeakGuard:
    """Feed it one progress dict (json.loads(progress.json)) per batch; it returns the warnings that batch raises.

    A batch counts towards a leak when an operator's numRowsTotal grew and the watermark advanced; a batch whose
    state shrank resets the count; a batch with neither (no data, watermark standing) leaves it unchanged, so idle
    batches do not hide a leak. Each leak is reported once, until the state shrinks again.
    """

    batches: int = 5
    _tracks: dict[int, _OperatorTrack] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.batches < 2:
            msg = f"the leak guard needs at least 2 batches to see growth, got {self.batches}"
            raise ValueError(msg)

    def observe(self, progress: dict[str, Any]) -> list[LeakWarning]:
        """Account for one batch's progress and return the leaks it reveals."""
        watermark = _parse_watermark(progress)
        batch_id = int(progress.get("batchId", -1))
        warnings: list[LeakWarning] = []
        for index, operator in enumerate(progress.get("stateOperators") or []):
            rows = int(operator.get("numRowsTotal", 0))
            track = self._tracks.get(index)
            if track is None:
                self._tracks[index] = _OperatorTrack(rows=rows, watermark=watermark, streak_start_rows=rows)
                continue
            advanced = watermark is not None and (track.watermark is None or watermark > track.watermark)
            if rows < track.rows:
                track.streak, track.warned, track.streak_start_rows = 0, False, rows
            elif rows > track.rows and advanced:
                if track.streak == 0:
                    track.streak_start_rows = track.rows
                track.streak += 1
            track.rows = rows
            if watermark is not None:
                track.watermark = watermark
            if track.streak >= self.batches and not track.warned:
                track.warned = True
                warnings.append(
                    LeakWarning(
                        operator_index=index,
                        operator_name=str(operator.get("operatorName", "unknown")),
                        batch_id=batch_id,
                        batches=track.streak,
                        rows_before=track.streak_start_rows,
                        rows_now=rows,
                        watermark=str((progress.get("eventTime") or {}).get("watermark", "")),
                    )
                )
        return warnings
