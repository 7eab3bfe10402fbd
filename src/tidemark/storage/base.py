"""The one interface every store offers tidemark: list, read, write atomically, copy, delete, below one root."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, Protocol

from tidemark.storage.uri import Location

# How folders were listed: the C listing, os.scandir, Hadoop's FileSystem, or one flat listing of an object store.
Walker = Literal["native", "python", "hadoop", "flat"]


@dataclass(frozen=True)
class DirListing:
    """One folder: its path relative to the root, its files as (name, bytes), its sub-folder names."""

    rel: str
    files: list[tuple[str, int]]
    dirs: list[str]


@dataclass(frozen=True)
class FileEntry:
    """One file below the root: relative path, size, modification time (epoch seconds) and version tag."""

    rel: str
    size: int
    mtime: float | None = None
    etag: str | None = None


def join(rel: str, name: str) -> str:
    """Join relative path parts with '/', whatever the platform."""
    return f"{rel}/{name}" if rel else name


def parent_of(rel: str) -> str:
    """The folder part of a relative path ('' at the root)."""
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


class Storage(Protocol):
    """What tidemark needs from a file system rooted at one location (all paths relative, '/'-separated)."""

    location: Location
    walker: Walker
    list_requests: int  # listing calls made so far (object stores count their paged requests)

    def uri(self, rel: str = "") -> str:
        """The full URI (or local path) of rel, as Spark and users name it."""
        ...

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel once, with all its files, skipping excluded relative paths; order unspecified."""
        ...

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        ...

    def list_files(self, rel: str = "") -> Iterator[FileEntry]:
        """Every file below rel, recursively (one paged listing on object stores)."""
        ...

    def stat(self, rel: str) -> FileEntry | None:
        """One file's entry, or None when it does not exist."""
        ...

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        ...

    def open_read(self, rel: str) -> BinaryIO:
        """A file opened for streaming reads (FileNotFoundError when missing)."""
        ...

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write so readers see all or nothing; with exclusive, False (and nothing written) if it exists."""
        ...

    def delete(self, rel: str) -> None:
        """Remove one file (never a folder); a missing file is not an error."""
        ...

    def delete_files(self, rels: list[str]) -> list[str]:
        """Remove these files (many per request where the store can); return those that were not files here."""
        ...

    def exists(self, rel: str) -> bool:
        """True when rel is a file or a folder holding anything."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Move one file within this store (copy then delete where the store cannot rename)."""
        ...

    def download(self, rel: str, local_path: str) -> int:
        """Copy one file to a local path; return its bytes."""
        ...

    def arrow(self) -> tuple[Any, str]:
        """A pyarrow file system and the root's path on it, for reading Parquet below the root."""
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


def folders_from_flat(entries: Iterator[FileEntry], base: str, exclude: frozenset[str]) -> Iterator[DirListing]:
    """Folder listings rebuilt from one flat, name-ordered listing of every file below base.

    Names sharing a prefix are contiguous in the order object stores list them, so a folder is complete
    once a name outside it arrives: it is emitted then (children before parents), which keeps memory
    to the folders on the current path rather than the whole listing.
    """
    open_folders: dict[str, tuple[list[tuple[str, int]], set[str]]] = {base: ([], set())}

    def is_excluded(rel: str) -> bool:
        return any(rel == e or rel.startswith(e + "/") for e in exclude)

    def ensure(folder: str) -> None:
        # Create the folder and its missing ancestors up to base, registering each as a child of its parent.
        chain = []
        while folder not in open_folders:
            chain.append(folder)
            folder = parent_of(folder)
        for name in reversed(chain):
            open_folders[name] = ([], set())
            open_folders[parent_of(name)][1].add(name.rsplit("/", 1)[-1])

    def close_outside(rel: str) -> Iterator[DirListing]:
        done = [f for f in open_folders if f != base and not rel.startswith(f + "/")]
        for folder in sorted(done, key=lambda f: -f.count("/")):
            files, dirs = open_folders.pop(folder)
            yield DirListing(folder, files, sorted(dirs))

    for entry in entries:
        folder = parent_of(entry.rel)
        if base and folder != base and not folder.startswith(base + "/"):
            continue
        yield from close_outside(entry.rel)
        if is_excluded(folder) or is_excluded(entry.rel):
            continue
        ensure(folder)
        open_folders[folder][0].append((entry.rel.rsplit("/", 1)[-1], entry.size))
    yield from close_outside("\x00/")
    if base in open_folders:
        files, dirs = open_folders.pop(base)
        if files or dirs:
            yield DirListing(base, files, sorted(dirs))
