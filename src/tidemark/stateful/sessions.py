"""Per-key sessions on the lifecycle layer: merge events into sessions, emit and remove them once closed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tidemark.stateful.api import KeyContext, KeyedProcessor

if TYPE_CHECKING:
    import pandas as pd

SESSION_COLUMNS = ("sessionStart", "sessionEnd", "count", "firstEventTime", "lastEventTime")


@dataclass(frozen=True)
class Session:
    """One session of one key, in epoch milliseconds: first event, last event, number of events."""

    first_ms: int
    last_ms: int
    count: int

    def end_ms(self, gap_ms: int) -> int:
        """When the session closes: last event + gap."""
        return self.last_ms + gap_ms


def merge_sessions(sessions: Iterable[Session], event_ms: Iterable[int], gap_ms: int) -> list[Session]:
    """Fold events into open sessions; two merge when the later starts no later than the earlier's last event + gap."""
    items = sorted([*sessions, *(Session(ms, ms, 1) for ms in event_ms)], key=lambda s: (s.first_ms, s.last_ms))
    merged: list[Session] = []
    for item in items:
        # Same rule as Spark's session_window (checked on 4.1.1): an event exactly `gap` after the last one still joins.
        if merged and item.first_ms <= merged[-1].last_ms + gap_ms:
            head = merged[-1]
            merged[-1] = Session(head.first_ms, max(head.last_ms, item.last_ms), head.count + item.count)
        else:
            merged.append(item)
    return merged


def split_closed(sessions: Iterable[Session], gap_ms: int, watermark_ms: int) -> tuple[list[Session], list[Session]]:
    """Split sessions into (closed: end <= watermark, still open)."""
    closed: list[Session] = []
    still_open: list[Session] = []
    for session in sessions:
        (closed if session.end_ms(gap_ms) <= watermark_ms else still_open).append(session)
    return closed, still_open


class SessionProcessor(KeyedProcessor):
    """Sessions of a key (a session ends when no event arrives for gap); emitted and removed once closed."""

    state_schema = "firsts ARRAY<BIGINT>, lasts ARRAY<BIGINT>, counts ARRAY<BIGINT>"

    def __init__(self, keys: list[str], key_ddl: list[str], gap: timedelta, event_time_column: str) -> None:
        self.keys = list(keys)
        self.gap_ms = gap // timedelta(milliseconds=1)
        self.event_time_column = event_time_column
        columns = ", ".join(
            [
                *(f"`{name}` {ddl}" for name, ddl in zip(keys, key_ddl, strict=True)),
                *("sessionStart TIMESTAMP", "sessionEnd TIMESTAMP", "count BIGINT"),
                *("firstEventTime TIMESTAMP", "lastEventTime TIMESTAMP"),
            ]
        )
        self.output_schema = columns

    def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
        """Merge the new events into the key's open sessions and expire at the earliest session end."""
        from tidemark.stateful.lifecycle import events_to_epoch_ms

        event_ms = [int(ms) for ms in events_to_epoch_ms(events[self.event_time_column]).dropna()]
        sessions = merge_sessions(_load(ctx.state), event_ms, self.gap_ms)
        self._store(ctx, sessions)
        return None

    def on_expire(self, key: tuple[Any, ...], ctx: KeyContext) -> pd.DataFrame | None:
        """Emit every session the watermark has passed; keep the key only while it has open sessions."""
        closed, still_open = split_closed(_load(ctx.state), self.gap_ms, ctx.watermark_ms)
        if still_open:
            ctx.keep()
            self._store(ctx, still_open)
        return self._rows(key, closed)

    def _store(self, ctx: KeyContext, sessions: list[Session]) -> None:
        ctx.set_state(
            {
                "firsts": [s.first_ms for s in sessions],
                "lasts": [s.last_ms for s in sessions],
                "counts": [s.count for s in sessions],
            }
        )
        if sessions:
            ctx.expire_at(min(s.end_ms(self.gap_ms) for s in sessions))

    def _rows(self, key: tuple[Any, ...], sessions: list[Session]) -> pd.DataFrame | None:
        import pandas as pd

        if not sessions:
            return None

        def stamps(values: list[int]) -> pd.Series:
            return pd.Series(pd.to_datetime(values, unit="ms", utc=True))

        data: dict[str, Any] = {name: [value] * len(sessions) for name, value in zip(self.keys, key, strict=True)}
        data["sessionStart"] = stamps([s.first_ms for s in sessions])
        data["sessionEnd"] = stamps([s.end_ms(self.gap_ms) for s in sessions])
        data["count"] = [s.count for s in sessions]
        data["firstEventTime"] = stamps([s.first_ms for s in sessions])
        data["lastEventTime"] = stamps([s.last_ms for s in sessions])
        frame: pd.DataFrame = pd.DataFrame(data)
        return frame


def _load(state: dict[str, Any] | None) -> list[Session]:
    if not state:
        return []
    firsts, lasts, counts = state.get("firsts") or [], state.get("lasts") or [], state.get("counts") or []
    return [Session(int(f), int(la), int(c)) for f, la, c in zip(firsts, lasts, counts, strict=True)]
