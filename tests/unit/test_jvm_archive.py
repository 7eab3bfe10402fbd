"""tests/jvm_archive.py: the class archive's key and its cache (no JVM: the dump is proved by every test run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import jvm_archive


def _installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (home / "jars" / name).write_bytes(b"x" * 10)
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    (tmp_path / "jdk" / "lib" / "server").mkdir(parents=True)
    (tmp_path / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    monkeypatch.setattr(jvm_archive, "_spark_home", lambda: home)
    monkeypatch.setattr(jvm_archive, "_java", lambda: java)
    monkeypatch.setenv("TIDEMARK_ENV_CACHE", str(tmp_path / "cache"))
    return home


def test_the_key_follows_the_jars_and_the_jvm_and_finds_a_written_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _installation(tmp_path, monkeypatch)
    first = jvm_archive.key()
    assert jvm_archive.key() == first
    assert jvm_archive.archive() is None
    (jvm_archive.root()).mkdir(parents=True)
    (jvm_archive.root() / f"{first}.jsa").write_bytes(b"archive")
    assert jvm_archive.archive() == jvm_archive.root() / f"{first}.jsa"
    assert jvm_archive.ensure() == jvm_archive.root() / f"{first}.jsa"  # found: nothing is dumped

    (home / "jars" / "spark-sql.jar").write_bytes(b"y" * 11)  # another build of a jar: another class path
    second = jvm_archive.key()
    assert second != first and jvm_archive.archive() is None
    (tmp_path / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"another jvm")
    assert jvm_archive.key() not in (first, second)


def test_the_cache_keeps_the_archives_used_last(tmp_path: Path) -> None:
    folder = tmp_path / "cds"
    folder.mkdir()
    for age in range(jvm_archive.KEPT + 3):
        path = folder / f"a{age}.jsa"
        path.write_bytes(b"")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # a0 used last
    (folder / "a0.jsa.partial").write_bytes(b"")  # not an archive: left alone
    jvm_archive._prune(folder)
    kept = {path.name for path in folder.glob("*.jsa")}
    assert kept == {f"a{age}.jsa" for age in range(jvm_archive.KEPT)}
    assert (folder / "a0.jsa.partial").exists()


def test_submit_options_map_the_archive_quietly(tmp_path: Path) -> None:
    options = jvm_archive.submit_options(tmp_path / "k.jsa").split()
    assert options == [f"-XX:SharedArchiveFile={tmp_path / 'k.jsa'}", "-Xlog:cds=off,cds+dynamic=off"]
