"""The state store provider has one spelling in tidemark's code (issue 38): the Spark setting that names it and its
two class names live in tidemark.config.provider; every other module imports them. The grep is written down."""

from __future__ import annotations

from pathlib import Path

from tidemark.config import StateStoreKind
from tidemark.config.provider import HDFS_PROVIDER, PROVIDER_KEY, ROCKSDB_PROVIDER

SRC = Path(__file__).resolve().parents[2] / "src" / "tidemark"


def test_the_provider_setting_and_classes_are_spelled_once() -> None:
    for literal in (PROVIDER_KEY, ROCKSDB_PROVIDER, HDFS_PROVIDER, "stateStore.providerClass"):
        found = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if literal in p.read_text(encoding="utf-8"))
        assert found == ["config/provider.py"], (literal, found)


def test_the_kind_of_a_provider_class() -> None:
    assert StateStoreKind.of_provider(ROCKSDB_PROVIDER) is StateStoreKind.ROCKSDB
    assert StateStoreKind.of_provider(HDFS_PROVIDER) is StateStoreKind.HDFS
    assert StateStoreKind.of_provider(None) is StateStoreKind.HDFS  # Spark's default
