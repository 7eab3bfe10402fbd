"""The user-facing API for custom per-key stateful logic: subclass KeyedProcessor, use the KeyContext."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.compat import StrEnum
from tidemark.stateful.expiry import ClampedExpiry, clamp_expiry, from_epoch_ms, to_epoch_ms

if TYPE_CHECKING:
    import pandas as pd


# The one value state the lifecycle layer keeps per key (its name in the checkpoint's transformWithState metadata).
STATE_VARIABLE = "state"


class TimeMode(StrEnum):
    """Which clock drives expiries: the watermark (event time) or the wall clock (processing time)."""

    EVENT_TIME = "event-time"
    PROCESSING_TIME = "processing-time"

    @property
    def spark_name(self) -> str:
        """The timeMode string transformWithStateInPandas expects."""
        return "EventTime" if self is TimeMode.EVENT_TIME else "ProcessingTime"


class KeyContext:
    """One key's view of its state and expiry during one call of on_events or on_expire."""

    def __init__(
        self,
        key: tuple[Any, ...],
        state: Mapping[str, Any] | None,
        *,
        watermark_ms: int,
        processing_time_ms: int,
        time_mode: TimeMode = TimeMode.EVENT_TIME,
        expiry_ms: int | None = None,
        expiring: bool = False,
    ) -> None:
        self.key = key
        self._state = dict(state) if state is not None else None
        self.watermark_ms = watermark_ms
        self.processing_time_ms = processing_time_ms
        self.time_mode = time_mode
        self.expiry_ms = expiry_ms
        self.expiring = expiring
        self.state_changed = False
        self.removed = False
        self.kept = False
        self.requested_expiry: ClampedExpiry | None = None

    @property
    def state(self) -> dict[str, Any] | None:
        """The key's state as {field: value}, or None when the key has none."""
        return None if self._state is None else dict(self._state)

    @property
    def now_ms(self) -> int:
        """The clock expiries are measured against: the watermark, or processing time."""
        return self.watermark_ms if self.time_mode is TimeMode.EVENT_TIME else self.processing_time_ms

    @property
    def watermark(self) -> datetime:
        """The current event-time watermark (UTC)."""
        return from_epoch_ms(max(self.watermark_ms, 0))

    @property
    def expiry(self) -> datetime | None:
        """The key's pending expiry, or during on_expire the expiry that fired."""
        return None if self.expiry_ms is None else from_epoch_ms(self.expiry_ms)

    def set_state(self, values: Mapping[str, Any]) -> None:
        """Replace the key's state (every field of the processor's state_schema)."""
        self._state = dict(values)
        self.state_changed = True
        self.removed = False

    def remove(self) -> None:
        """Delete the key's state and pending expiry now."""
        self._state = None
        self.removed = True
        self.kept = False
        self.requested_expiry = None

    def keep(self) -> None:
        """In on_expire: keep the key's state instead of deleting it (it then lives until a new expiry)."""
        self.kept = True

    def expire_at(self, when: datetime | int) -> None:
        """Ask for on_expire at this time (datetime or epoch ms); one behind the watermark is clamped to it."""
        requested = to_epoch_ms(when)
        # A timer re-armed while one is firing must lie strictly ahead, or Spark would fire and drop it at once.
        floor = self.now_ms + 1 if self.expiring else self.now_ms
        self.requested_expiry = clamp_expiry(requested, floor, self.key)

    def expire_after(self, delay: timedelta) -> None:
        """Ask for on_expire `delay` after the current watermark (or processing time)."""
        self.expire_at(max(self.now_ms, 0) + delay // timedelta(milliseconds=1))


class KeyedProcessor:
    """Base class of custom per-key logic; name a subclass in `[aggregation] processor = "pkg.module:Class"`.

    Set state_schema and output_schema (Spark DDL strings). on_events gets each key's new events as one pandas
    DataFrame; on_expire runs when the key's expiry passes. After on_expire the key's state is deleted unless the
    processor calls ctx.keep(). idle_timeout makes tidemark set the expiry to last event + idle_timeout itself.
    """

    state_schema: str = "value STRING"
    output_schema: str = "value STRING"
    time_mode: TimeMode = TimeMode.EVENT_TIME
    idle_timeout: timedelta | None = None
    ttl: timedelta | None = None

    def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
        """Handle one key's new events: update ctx state, set an expiry, return rows to emit (or None)."""
        raise NotImplementedError

    def on_expire(self, key: tuple[Any, ...], ctx: KeyContext) -> pd.DataFrame | None:
        """Return the rows to emit when the key expires; its state is deleted afterwards unless ctx.keep()."""
        return None
