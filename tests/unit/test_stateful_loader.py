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


class _Conf:
    def __init__(self, provider: str | None) -> None:
        self.provider = provider

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.provider


def _events(provider: str | None) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(sparkSession=SimpleNamespace(conf=_Conf(provider)))


def test_the_hdfs_state_store_is_refused_with_the_config_fix() -> None:
    from tidemark.config.model import HDFS_PROVIDER
    from tidemark.stateful.lifecycle import check_requirements

    with pytest.raises(UsageError, match='state_store = "rocksdb"'):
        check_requirements(_events(HDFS_PROVIDER), KeyedProcessor())  # type: ignore[arg-type]


def test_ttl_in_event_time_is_refused() -> None:
    from datetime import timedelta

    from tidemark.config.model import ROCKSDB_PROVIDER
    from tidemark.stateful.lifecycle import check_requirements

    class WithTtl(KeyedProcessor):
        ttl = timedelta(minutes=1)

    with pytest.raises(UsageError, match="PROCESSING_TIME"):
        check_requirements(_events(ROCKSDB_PROVIDER), WithTtl())  # type: ignore[arg-type]
