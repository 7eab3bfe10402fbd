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


def test_tidemark_s_own_on_disk_names_are_spelled_once_in_formats() -> None:
    # The archive folder (recover, rollback, state repartition), the recovery plan in it, the quarantine's batch
    # files and the marker of an executor-written quarantine batch: formats/layout.py owns each (issue 38).
    from tidemark.formats import ARCHIVE_DIR, QUARANTINE_DONE_FILE, RECOVERY_PLAN_FILE, quarantine_batch_name

    for literal in (f'"{ARCHIVE_DIR}"', f'"{RECOVERY_PLAN_FILE}"', f'"{QUARANTINE_DONE_FILE}"', '"batch-"'):
        found = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if literal in p.read_text(encoding="utf-8"))
        assert found == ["formats/layout.py"], (literal, found)
    assert quarantine_batch_name(7) == "batch-000000000007.jsonl"


def test_the_kind_of_a_provider_has_one_representation() -> None:
    # config's StateStoreKind: what a config asks for, what a checkpoint records, what wrote a store folder (the
    # files reader's rows carry it too; formats' own Provider enum is gone, issue 38).
    import re

    from tidemark.formats.state_replay import StoreRows

    for value in ("rocksdb", "hdfs"):  # a constant or an enum member spelling the kind: NAME = "rocksdb"
        pattern = re.compile(rf'^\s*[A-Z_]+ = "{value}"', re.MULTILINE)
        found = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text("utf-8")))
        found = [f for f in found if f != "storage/uri.py" or value != "hdfs"]  # hdfs:// the URI scheme
        assert found == ["config/model.py"], (value, found)
    assert "StateStoreKind" in str(StoreRows.__annotations__["provider"])
