"""The C folder listing agrees with os.scandir, entry for entry, on the cases a checkpoint can hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.errors import StorageError
from tidemark.storage import DirListing
from tidemark.storage.local import LocalFS, native_walk_available


def _tree(root: Path) -> None:
    """Files of several sizes, empty and nested folders, every kind of symlink, a name that is not UTF-8."""
    (root / "state/0/0").mkdir(parents=True)
    (root / "state/0/1/SSTs").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "metadata").write_text('{"id":"x"}')
    (root / "state/0/0/1.delta").write_bytes(b"d" * 1234)
    (root / "state/0/0/.1.delta.crc").write_bytes(b"c" * 12)
    (root / "state/0/0/2.snapshot").write_bytes(b"")
    (root / "state/0/1/SSTs/000008-abc.sst").write_bytes(b"s" * 70_000)
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 9999)
    os.symlink(outside, root / "state/0/link-to-dir")
    os.symlink(outside / "big", root / "state/0/link-to-file")
    os.symlink(root / "nowhere", root / "state/0/broken-link")
    with open(os.path.join(os.fsencode(root / "state/0/0"), b"bad-\xff-name"), "wb") as handle:
        handle.write(b"12345")


def _as_set(listings: list[DirListing]) -> set[tuple[str, frozenset[tuple[str, int]], tuple[str, ...]]]:
    return {(x.rel, frozenset(x.files), tuple(x.dirs)) for x in listings}


def test_native_listing_is_built() -> None:
    # The install compiles it (setup.py); without it `checkpoint inspect` misses its speed target (BENCHMARKS.md).
    assert native_walk_available()
    assert LocalFS("/tmp").walker == "native"
    assert LocalFS("/tmp", native=False).walker == "python"


def test_native_and_python_walks_agree(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    _tree(root)
    native = list(LocalFS(str(root)).walk())
    python = list(LocalFS(str(root), native=False).walk())
    assert _as_set(native) == _as_set(python)
    by_rel = {x.rel: x for x in native}
    # Symlinks are files with their own size, never followed: nothing of the outside folder is listed.
    links = dict(by_rel["state/0"].files)
    assert set(links) == {"link-to-dir", "link-to-file", "broken-link"}
    assert links["link-to-dir"] == os.lstat(root / "state/0/link-to-dir").st_size
    assert "big" not in {name for x in native for name, _ in x.files}
    expected = {"1.delta": 1234, ".1.delta.crc": 12, "2.snapshot": 0, "bad-\udcff-name": 5}
    assert dict(by_rel["state/0/0"].files) == expected
    assert by_rel["state/0/1/SSTs"].files == [("000008-abc.sst", 70_000)]
    assert by_rel["empty"] == DirListing("empty", [], [])
    assert by_rel[""].dirs == ["empty", "state"]


@pytest.mark.parametrize("native", [True, False])
def test_missing_and_file_paths_are_none(tmp_path: Path, native: bool) -> None:
    (tmp_path / "a-file").write_text("x")
    fs = LocalFS(str(tmp_path), native=native)
    assert fs.list_dir("missing") is None
    assert fs.list_dir("a-file") is None


def test_inspect_reports_the_walker(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    _tree(root)
    report = inspect_checkpoint(str(root))
    assert report.walker == "native"
    # os.walk puts a symlink to a folder among the folders (without entering it); it is a file to the checkpoint.
    expected = sum(
        os.lstat(os.path.join(d, name)).st_size
        for d, dirs, files in os.walk(root)
        for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]
    )
    assert report.bytes_total == expected


def test_listing_refuses_a_path_outside_the_root(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="outside"):
        LocalFS(str(tmp_path / "ckpt")).list_dir("../elsewhere")
