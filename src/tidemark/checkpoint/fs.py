"""File access for checkpoints: a fast native walk for local paths, Hadoop FileSystem for other URIs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

from tidemark.errors import CheckpointError

Backend = Literal["auto", "local", "hadoop"]
# How a file system lists folders: the C listing, os.scandir, or Hadoop's FileSystem.
Walker = Literal["native", "python", "hadoop"]
Listing = tuple[list[tuple[str, int]], list[str]]


def _load_native() -> Callable[[str], Listing | None] | None:
    """The C listing, built at install when a compiler is there (setup.py); None otherwise."""
    try:
        from tidemark.checkpoint._fastwalk import list_dir
    except ImportError:
        return None
    return list_dir


_NATIVE_LIST = _load_native()


@dataclass(frozen=True)
class DirListing:
    """One folder: its path relative to the root, its files as (name, bytes), its sub-folder names."""

    rel: str
    files: list[tuple[str, int]]
    dirs: list[str]


def join(rel: str, name: str) -> str:
    """Join relative path parts with '/', whatever the platform."""
    return f"{rel}/{name}" if rel else name


class CheckpointFS(Protocol):
    """What inspect, prune and the run lock need from a file system."""

    root: str
    walker: Walker

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel (depth first), skipping the relative paths in exclude."""
        ...

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        ...

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        ...

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write a file so readers see all or nothing; with exclusive, False if it already exists."""
        ...

    def delete(self, rel: str) -> None:
        """Remove one file (never a folder); a missing file is not an error."""
        ...

    def exists(self, rel: str) -> bool:
        """True when the path exists."""
        ...


def walk_folders(
    list_dir: Callable[[str], DirListing | None], rel: str, exclude: frozenset[str]
) -> Iterator[DirListing]:
    """Depth-first over folders with an explicit stack (no recursion limit), skipping excluded paths."""
    stack = [rel]
    while stack:
        current = stack.pop()
        listing = list_dir(current)
        if listing is None:
            continue
        yield listing
        for name in reversed(listing.dirs):
            child = join(current, name)
            if child not in exclude:
                stack.append(child)


def is_local(path: str) -> bool:
    """True for plain paths and file: URIs; False for hdfs://, s3a://, abfss:// and the like."""
    scheme = urlparse(path).scheme
    # A one-letter scheme is a Windows drive letter, not a URI.
    return scheme in ("", "file") or len(scheme) == 1


def local_path(path: str) -> str:
    """The OS path of a local path or file: URI."""
    return urlparse(path).path if path.startswith("file:") else path


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
    """A checkpoint on a local or mounted disk, listed in C (readdir + fstatat) or with os.scandir."""

    def __init__(self, root: str, *, native: bool = True) -> None:
        self.root = os.path.abspath(local_path(root))
        self._real_root = os.path.realpath(self.root)
        self._list = _NATIVE_LIST if native and _NATIVE_LIST is not None else _scandir
        self.walker: Walker = "native" if self._list is not _scandir else "python"

    def _abs(self, rel: str) -> str:
        full = os.path.join(self.root, *rel.split("/")) if rel else self.root
        # Guard every access: nothing outside the root is read, written or removed.
        parent = os.path.realpath(os.path.dirname(full)) if rel else self._real_root
        if parent != self._real_root and not parent.startswith(self._real_root + os.sep):
            msg = f"refusing to touch {full}: it is outside the checkpoint {self.root}"
            raise CheckpointError(msg)
        return full

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel, iteratively (no recursion limit), symlinks not followed."""
        return walk_folders(self.list_dir, rel, exclude)

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        path = self._abs(rel)
        try:
            found = self._list(path)
        except PermissionError as exc:
            msg = f"cannot read {path}: {exc.strerror}; run as a user that can read the checkpoint"
            raise CheckpointError(msg) from exc
        if found is None:
            return None
        files, dirs = found
        dirs.sort()
        return DirListing(rel, files, dirs)

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        try:
            with open(self._abs(rel), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write to a temp file then rename; with exclusive, link it so an existing file is kept."""
        target = self._abs(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temp = f"{target}.{os.getpid()}.{id(data)}.tmp"
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

    def exists(self, rel: str) -> bool:
        """True when the path exists."""
        return os.path.lexists(self._abs(rel))


class HadoopFS:
    """A checkpoint on any Hadoop file system (hdfs, abfss, s3a, gs), through the Spark JVM."""

    def __init__(self, root: str, spark: Any | None = None) -> None:
        from tidemark.session import build_session  # pyspark only on this path

        session: Any = spark if spark is not None else build_session()
        jvm: Any = session._jvm
        self._jvm = jvm
        self.root = root.rstrip("/")
        self._root_path = jvm.org.apache.hadoop.fs.Path(self.root)
        fs = self._root_path.getFileSystem(session._jsc.hadoopConfiguration())
        # The checksum file system of file: URIs hides .crc files from listings; they are files we count and prune.
        from py4j.java_gateway import is_instance_of  # type: ignore[import-untyped]

        if is_instance_of(session.sparkContext._gateway, fs, "org.apache.hadoop.fs.ChecksumFileSystem"):
            fs = fs.getRawFileSystem()
        self._fs = fs
        self.walker: Walker = "hadoop"

    def _path(self, rel: str) -> Any:
        if rel.startswith("/") or ".." in rel.split("/"):
            msg = f"refusing to touch {rel!r}: it is outside the checkpoint {self.root}"
            raise CheckpointError(msg)
        return self._jvm.org.apache.hadoop.fs.Path(self._root_path, rel) if rel else self._root_path

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel, one listStatus call per folder."""
        return walk_folders(self.list_dir, rel, exclude)

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        path = self._path(rel)
        if not self._fs.exists(path):
            return None
        files: list[tuple[str, int]] = []
        dirs: list[str] = []
        for status in self._fs.listStatus(path):
            name = status.getPath().getName()
            if status.isDirectory():
                dirs.append(name)
            else:
                files.append((name, int(status.getLen())))
        dirs.sort()
        return DirListing(rel, files, dirs)

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        path = self._path(rel)
        if not self._fs.exists(path) or self._fs.getFileStatus(path).isDirectory():
            return None
        stream = self._fs.open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data)

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write a temp file then rename it (rename does not overwrite, so exclusive holds)."""
        target = self._path(rel)
        temp = self._path(f"{rel}.{os.getpid()}.tmp")
        stream = self._fs.create(temp, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        if not exclusive and self._fs.exists(target):
            self._fs.delete(target, False)
        renamed = bool(self._fs.rename(temp, target))
        if not renamed:
            self._fs.delete(temp, False)
        return renamed

    def delete(self, rel: str) -> None:
        """Remove one file; a missing file is not an error."""
        path = self._path(rel)
        if self._fs.exists(path) and not self._fs.getFileStatus(path).isDirectory():
            self._fs.delete(path, False)

    def exists(self, rel: str) -> bool:
        """True when the path exists."""
        return bool(self._fs.exists(self._path(rel)))


def open_fs(path: str, backend: Backend = "auto", spark: Any | None = None) -> CheckpointFS:
    """The file system for a checkpoint path: local unless it is a non-file URI (or hadoop is asked for)."""
    if backend == "hadoop" or (backend == "auto" and not is_local(path)):
        return HadoopFS(path, spark)
    return LocalFS(path)
