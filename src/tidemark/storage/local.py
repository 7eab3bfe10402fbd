"""A local or mounted folder: listed in C (readdir + fstatat) or with os.scandir, written atomically."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from tidemark.errors import StorageError
from tidemark.storage.base import DirListing, FileEntry, Walker, join, walk_folders
from tidemark.storage.uri import Location, parse_location

Listing = tuple[list[tuple[str, int]], list[str]]


def _load_native() -> Callable[[str], Listing | None] | None:
    """The C listing, built at install when a compiler is there (setup.py); None otherwise."""
    try:
        from tidemark.storage._fastwalk import list_dir
    except ImportError:
        return None
    return list_dir


_NATIVE_LIST = _load_native()


def native_walk_available() -> bool:
    """True when the C listing was built with this install."""
    return _NATIVE_LIST is not None


def _scandir(path: str) -> Listing | None:
    """One folder through os.scandir: the fallback of the C listing, with the same semantics."""
    files: list[tuple[str, int]] = []
    dirs: list[str] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.name)
                else:
                    try:
                        files.append((entry.name, entry.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:
                        continue  # removed while we walked
    except (FileNotFoundError, NotADirectoryError):
        return None
    return files, dirs


class LocalFS:
    """A folder on a local or mounted disk; nothing outside it is ever read, written or removed."""

    def __init__(self, root: str | Location, *, native: bool = True) -> None:
        self.location = root if isinstance(root, Location) else parse_location(root)
        self.root = self.location.key
        self._real_root = os.path.realpath(self.root)
        self._list = _NATIVE_LIST if native and _NATIVE_LIST is not None else _scandir
        self.walker: Walker = "native" if self._list is not _scandir else "python"
        self.list_requests = 0

    def uri(self, rel: str = "") -> str:
        """The local path of rel (a file: URI when the root was given as one)."""
        return self.location.join(rel).uri

    def _abs(self, rel: str) -> str:
        full = os.path.join(self.root, *rel.split("/")) if rel else self.root
        # Guard every access: nothing outside the root is read, written or removed.
        parent = os.path.realpath(os.path.dirname(full)) if rel else self._real_root
        if parent != self._real_root and not parent.startswith(self._real_root + os.sep):
            msg = f"refusing to touch {full}: it is outside {self.root}"
            raise StorageError(msg)
        return full

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel, depth first (no recursion limit), symlinks not followed."""
        return walk_folders(self.list_dir, rel, exclude)

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        path = self._abs(rel)
        self.list_requests += 1
        try:
            found = self._list(path)
        except PermissionError as exc:
            msg = f"cannot read {path}: {exc.strerror}; run as a user that can read it"
            raise StorageError(msg) from exc
        if found is None:
            return None
        files, dirs = found
        dirs.sort()
        return DirListing(rel, files, dirs)

    def list_files(self, rel: str = "") -> Iterator[FileEntry]:
        """Every file below rel with its size and modification time, name order within each folder."""
        for listing in self.walk(rel):
            for name, size in sorted(listing.files):
                child = join(listing.rel, name)
                try:
                    mtime = os.lstat(self._abs(child)).st_mtime
                except FileNotFoundError:
                    continue
                yield FileEntry(child, size, mtime)

    def stat(self, rel: str) -> FileEntry | None:
        """One file's entry, or None when it does not exist or is a folder."""
        try:
            info = os.stat(self._abs(rel))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if os.path.isdir(self._abs(rel)):
            return None
        return FileEntry(rel, info.st_size, info.st_mtime, f"{info.st_mtime_ns}-{info.st_size}")

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        try:
            with open(self._abs(rel), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def open_read(self, rel: str) -> BinaryIO:
        """The file opened for reading (FileNotFoundError when missing)."""
        return open(self._abs(rel), "rb")

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write to a temp file then rename; with exclusive, link it so an existing file is kept."""
        target = self._abs(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Hidden, as Spark names its own: a reader listing the folder (Spark's logs, a glob of batch ids) skips it.
        folder, name = os.path.split(target)
        temp = os.path.join(folder, f".{name}.{os.getpid()}.{id(data)}.tmp")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            if exclusive:
                try:
                    os.link(temp, target)
                except FileExistsError:
                    return False
            else:
                os.replace(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        return True

    def delete(self, rel: str) -> None:
        """Remove one file; a missing file is not an error."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._abs(rel))

    def delete_files(self, rels: list[str]) -> list[str]:
        """Remove these files; return those that were not files (missing, or folders)."""
        missing: list[str] = []
        for rel in rels:
            try:
                os.unlink(self._abs(rel))
            except (FileNotFoundError, IsADirectoryError, PermissionError):
                if os.path.isfile(self._abs(rel)):
                    raise
                missing.append(rel)
        return missing

    def exists(self, rel: str) -> bool:
        """True when the path exists."""
        return os.path.lexists(self._abs(rel))

    def rename(self, source: str, target: str) -> None:
        """Move a file or folder within the root (a plain rename; across devices, copy then remove)."""
        src, dst = self._abs(source), self._abs(target)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            os.rename(src, dst)
        except OSError:
            shutil.move(src, dst)

    def download(self, rel: str, local_path: str) -> int:
        """Copy a file to a local path; return its bytes."""
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        shutil.copyfile(self._abs(rel), local_path)
        return os.path.getsize(local_path)

    def arrow(self) -> tuple[Any, str]:
        """pyarrow's local file system and the root path."""
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), self.root
