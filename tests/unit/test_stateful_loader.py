"""Loading the processor a config names (no JVM)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.errors import UsageError
from tidemark.stateful import KeyedProcessor, load_processor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stateful"


@pytest.fixture
def on_path() -> Iterator[None]:
    sys.path.insert(0, str(FIXTURES))
    try:
        yield
    finally:
        sys.path.remove(str(FIXTURES))


def test_loads_an_instance_of_the_named_class(on_path: None) -> None:
    processor = load_processor("stateful_processors:CountUntilIdle")
    assert isinstance(processor, KeyedProcessor)
    assert type(processor).__name__ == "CountUntilIdle"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("stateful_processors.CountUntilIdle", "must look like"),
        ("no_such_module_xyz:Thing", "cannot import processor module"),
        ("stateful_processors:Missing", "subclass of tidemark.stateful.KeyedProcessor"),
        ("stateful_processors:NotAProcessor", "subclass of tidemark.stateful.KeyedProcessor"),
    ],
)
def test_bad_specs_are_usage_errors(on_path: None, spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_processor(spec)
