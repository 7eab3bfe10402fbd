"""Human duration strings ("15 minutes", "4h", "500 ms") parsed once into timedelta."""

from __future__ import annotations

import re
from datetime import timedelta

from tidemark.errors import UsageError

_UNITS: dict[str, float] = {
    "ms": 0.001,
    "msec": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration(text: str) -> timedelta:
    """Parse "10 minutes", "4h", "1h30m", "2 days" into a timedelta; raise UsageError otherwise."""
    raw = text.strip().lower()
    pos, total, parts = 0, 0.0, 0
    while pos < len(raw):
        match = _PART.match(raw, pos)
        if match is None or match.group(2) not in _UNITS:
            msg = f"cannot read duration {text!r}: write it like '15 minutes', '4h' or '500 ms'"
            raise UsageError(msg)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos, parts = match.end(), parts + 1
    if parts == 0:
        msg = f"cannot read duration {text!r}: it is empty"
        raise UsageError(msg)
    return timedelta(seconds=total)


def spark_interval(value: timedelta) -> str:
    """Render a timedelta as an interval string Spark's window/watermark functions accept."""
    millis = round(value.total_seconds() * 1000)
    if millis % 1000 == 0:
        return f"{millis // 1000} seconds"
    return f"{millis} milliseconds"


def human(value: timedelta) -> str:
    """Short human rendering: '15m', '1h30m', '2.5s'."""
    seconds = value.total_seconds()
    if seconds < 60:
        return f"{seconds:g}s"
    out, rest = [], int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)


def in_words(seconds: float) -> str:
    """A span a reader takes in at a glance: '45 s', '12 minutes', '5.5 hours', '328 days' (raw numbers: --json)."""
    sign = "-" if seconds < 0 else ""
    value = abs(seconds)
    if value < 90:
        return f"{sign}{value:,.0f} s"
    if value < 90 * 60:
        return f"{sign}{value / 60:,.0f} minutes"
    if value < 48 * 3600:
        return f"{sign}{value / 3600:,.1f} hours"
    return f"{sign}{value / 86400:,.0f} days"
