"""Expiry arithmetic of the lifecycle layer: epoch milliseconds, and clamping behind the watermark."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from tidemark.compat import UTC

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_ms(when: datetime | int) -> int:
    """Epoch milliseconds of a timezone-aware datetime (naive is read as UTC) or of an int already in ms."""
    if isinstance(when, datetime):
        aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    return int(when)


def from_epoch_ms(ms: int) -> datetime:
    """The UTC datetime of epoch milliseconds."""
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True)
class ClampedExpiry:
    """An expiry after clamping: what was asked, what is used, and whether they differ."""

    requested_ms: int
    effective_ms: int

    @property
    def clamped(self) -> bool:
        """True when the requested expiry lay behind the floor and was moved up to it."""
        return self.effective_ms != self.requested_ms


def clamp_expiry(requested_ms: int, floor_ms: int, key: object = None) -> ClampedExpiry:
    """Move an expiry that lies before floor_ms (the watermark, or processing time) up to it, and log it."""
    if requested_ms >= floor_ms:
        return ClampedExpiry(requested_ms, requested_ms)
    # Spark's older API (applyInPandasWithState) fails the query here; a late expiry is a timing detail, not a bug.
    log.warning(
        "tidemark.stateful: expiry %s for key %r lies behind the watermark %s; clamped to the watermark",
        from_epoch_ms(requested_ms).isoformat(),
        key,
        from_epoch_ms(floor_ms).isoformat(),
    )
    return ClampedExpiry(requested_ms, floor_ms)
