"""Byte sizes written as plain numbers or with units ("126m", "3.8g", "512 MiB")."""

from __future__ import annotations

import re

from tidemark.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int | float) -> int:
    """Parse a size in bytes; units are binary like Spark's ("1g" = 1024**3 bytes)."""
    if isinstance(text, int | float):
        return int(text)
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        msg = f"cannot read size {text!r}: write plain bytes or a unit, like '126m', '3.8g' or '512 MiB'"
        raise UsageError(msg)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(value: float) -> str:
    """Render bytes for people: '3.8 GiB', '126.0 MiB', '512 B'."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
