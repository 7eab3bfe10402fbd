"""Durations and sizes as people write them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tidemark.durations import human, parse_duration, spark_interval
from tidemark.errors import UsageError
from tidemark.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10 minutes", 600), ("4h", 14400), ("1h30m", 5400), ("500 ms", 0.5), ("2 days", 172800), ("15 min", 900)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "10 parsecs", "5"])
def test_bad_duration(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


def test_spark_interval_and_human() -> None:
    assert spark_interval(timedelta(minutes=15)) == "900 seconds"
    assert spark_interval(timedelta(milliseconds=1500)) == "1500 milliseconds"
    assert human(timedelta(hours=1, minutes=30)) == "1h30m"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("126m", 126 * 1024**2), ("3.8g", int(3.8 * 1024**3)), ("512 MiB", 512 * 1024**2), ("1000", 1000), (42, 42)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


def test_bad_size_and_format() -> None:
    with pytest.raises(UsageError, match="cannot read size"):
        parse_size("12 parsecs")
    assert format_size(3 * 1024**3) == "3.0 GiB"
    assert format_size(512) == "512 B"
