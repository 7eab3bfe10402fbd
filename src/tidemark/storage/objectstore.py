"""Object stores (Azure Blob/ADLS, S3, GCS) through fsspec: flat paged listings, copy-then-delete moves."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import Any, BinaryIO, Protocol, cast

from tidemark.errors import StorageError
from tidemark.storage.base import DirListing, FileEntry, Walker, folders_from_flat, join
from tidemark.storage.uri import Location


class Backend(Protocol):
    """What differs between clouds: paged listings, conditional writes, and turning errors into one line."""

    location: Location

    def list_pages(self, prefix: str, delimiter: bool) -> Iterator[tuple[list[FileEntry], list[str]]]:
        """Pages of (files with full keys, sub-prefixes) below prefix; each page costs one request."""
        ...

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Write key only if it does not exist; False when it does."""
        ...

    def check_bucket(self) -> None:
        """Raise a StorageError naming the container or bucket when it does not exist or cannot be reached."""
        ...

    def translate(self, exc: BaseException, what: str) -> StorageError | None:
        """A one-line StorageError for a cloud error (missing bucket, credentials, network), or None."""
        ...


class ObjectStore:
    """A prefix of a container or bucket; files are blobs, folders are name prefixes."""

    def __init__(self, location: Location, fs: Any, backend: Backend) -> None:
        self.location = location
        self.walker: Walker = "flat"
        self.list_requests = 0
        self._fs = fs
        self._backend = backend
        self._prefix = location.key.strip("/")

    # --- names -----------------------------------------------------------------------------------------

    def uri(self, rel: str = "") -> str:
        """The full URI of rel, in the scheme the user wrote."""
        return self.location.join(rel).uri

    def _key(self, rel: str) -> str:
        if rel.startswith("/") or ".." in rel.split("/"):
            msg = f"refusing to touch {rel!r}: it is outside {self.location.uri}"
            raise StorageError(msg)
        rel = rel.strip("/")
        return join(self._prefix, rel) if self._prefix and rel else (self._prefix or rel)

    def _path(self, rel: str) -> str:
        return f"{self.location.bucket}/{self._key(rel)}"

    def _rel(self, key: str) -> str:
        return key[len(self._prefix) + 1 :] if self._prefix else key

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except StorageError:
            raise
        except FileNotFoundError:
            raise
        except Exception as exc:
            translated = self._backend.translate(exc, what)
            if translated is None:
                raise
            raise translated from exc

    # --- listing ---------------------------------------------------------------------------------------

    def _pages(self, rel: str, delimiter: bool) -> Iterator[tuple[list[FileEntry], list[str]]]:
        key = self._key(rel)
        prefix = f"{key}/" if key else ""
        with self._errors(f"list {self.uri(rel)}"):
            for files, prefixes in self._backend.list_pages(prefix, delimiter):
                self.list_requests += 1
                yield files, prefixes

    def list_files(self, rel: str = "") -> Iterator[FileEntry]:
        """Every blob below rel, from one paged listing of the prefix (about one request per 1,000-5,000)."""
        for files, _ in self._pages(rel, delimiter=False):
            for entry in files:
                yield FileEntry(self._rel(entry.rel), entry.size, entry.mtime, entry.etag)

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder below rel, rebuilt from one flat listing (children before parents)."""
        return folders_from_flat(self.list_files(rel), rel.strip("/"), exclude)

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder through a delimited listing, or None when nothing is below it."""
        files: list[tuple[str, int]] = []
        dirs: list[str] = []
        for page_files, prefixes in self._pages(rel, delimiter=True):
            files.extend((entry.rel.rsplit("/", 1)[-1], entry.size) for entry in page_files)
            dirs.extend(p.rstrip("/").rsplit("/", 1)[-1] for p in prefixes)
        if not files and not dirs:
            return None
        return DirListing(rel.strip("/"), files, sorted(dirs))

    # --- files -----------------------------------------------------------------------------------------

    def stat(self, rel: str) -> FileEntry | None:
        """One blob's entry, or None when it does not exist."""
        with self._errors(f"read {self.uri(rel)}"):
            try:
                info = self._fs.info(self._path(rel))
            except FileNotFoundError:
                return None
        if info.get("type") == "directory":
            return None
        return FileEntry(rel, int(info.get("size") or 0), _mtime(info), _etag(info))

    def read_bytes(self, rel: str) -> bytes | None:
        """A blob's content, or None when it does not exist."""
        with self._errors(f"read {self.uri(rel)}"):
            try:
                data: bytes = self._fs.cat_file(self._path(rel))
            except (FileNotFoundError, IsADirectoryError):
                return None
        return data

    def open_read(self, rel: str) -> BinaryIO:
        """The blob opened for streaming reads (FileNotFoundError when missing)."""
        with self._errors(f"read {self.uri(rel)}"):
            raw = self._fs.open(self._path(rel), "rb")
        # fsspec's files do not take readline(size): a standard buffered reader over them does, like local files.
        return cast(BinaryIO, io.BufferedReader(raw, buffer_size=1024 * 1024))

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """One PUT: readers see the old object or the new one, never a part."""
        with self._errors(f"write {self.uri(rel)}"):
            if exclusive:
                return self._backend.create_exclusive(self._key(rel), data)
            self._fs.pipe_file(self._path(rel), data)
        return True

    def delete(self, rel: str) -> None:
        """Remove one blob; a missing blob is not an error."""
        with self._errors(f"delete {self.uri(rel)}"), contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._path(rel))

    def delete_files(self, rels: list[str]) -> list[str]:
        """Remove these blobs, in batches where the service has them (Azure: 256 a request); return the missing.

        Without batches each blob costs a stat and a delete, as `delete` does.
        """
        batch = getattr(self._backend, "delete_many", None)
        if batch is not None:
            with self._errors(f"delete below {self.uri()}"):
                gone = set(batch([self._key(rel) for rel in rels]))
            return [rel for rel in rels if self._key(rel) in gone]
        missing: list[str] = []
        for rel in rels:
            if self.stat(rel) is None:
                missing.append(rel)
            else:
                self.delete(rel)
        return missing

    def exists(self, rel: str) -> bool:
        """True for a blob, or a prefix with at least one blob below it.

        Folder markers do not count: Hadoop's ABFS over the Blob endpoint leaves one empty `hdi_isfolder` blob per
        folder it made (s3a a `dir/` object), so a checkpoint whose files were all deleted still holds a tree of
        markers; a delimited listing would report its subfolders, and a move of it would find nothing to move.
        A flat listing skips them (one request when the prefix holds a file).
        """
        if rel.strip("/") and self.stat(rel) is not None:
            return True
        return any(files for files, _ in self._pages(rel, delimiter=False))

    def copy(self, source: str, target: str) -> None:
        """Copy one blob server-side."""
        self.copy_to(source, self, target)

    def same_bucket(self, other: ObjectStore) -> bool:
        """True when other lies in the same container or bucket (server-side copies work between them)."""
        mine, theirs = self.location, other.location
        return (mine.kind, mine.bucket, mine.account) == (theirs.kind, theirs.bucket, theirs.account)

    def copy_to(self, source: str, other: ObjectStore, target: str, size: int | None = None) -> None:
        """Copy one blob server-side into another prefix of the same bucket: one request.

        The paths go as lists: given strings, fsspec first asks whether each is a folder (a listing or two more a
        file, which made a folder move on Azure cost ~6 requests a file). On S3 a blob of known size below
        CopyObject's limit goes straight to CopyObject (s3fs would first ask its size).
        """
        with self._errors(f"copy {self.uri(source)}"):
            copy_key = getattr(self._backend, "copy_key", None)
            if copy_key is None or size is None or not copy_key(self._key(source), other._key(target), size):
                self._fs.copy([self._path(source)], [other._path(target)])

    def delete_present(self, rels: list[str]) -> None:
        """Remove blobs just listed, in batches where the service has them (Azure 256, S3 1,000 a request).

        Unlike delete_files it cannot tell which were missing (S3 answers "deleted" for a missing key too).
        """
        batch = getattr(self._backend, "delete_many", None) or getattr(self._backend, "delete_keys", None)
        if batch is None:
            for rel in rels:
                self.delete(rel)
            return
        with self._errors(f"delete below {self.uri()}"):
            batch([self._key(rel) for rel in rels])

    def rename(self, source: str, target: str) -> None:
        """Copy then delete: object stores cannot rename (journal the move when it must survive a crash)."""
        self.copy(source, target)
        self.delete(source)

    def download(self, rel: str, local_path: str) -> int:
        """Copy one blob to a local path; return its bytes."""
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        with self._errors(f"read {self.uri(rel)}"):
            self._fs.get_file(self._path(rel), local_path)
        return os.path.getsize(local_path)

    def arrow(self) -> tuple[Any, str]:
        """A pyarrow file system over this store's fsspec file system, and the root's path on it."""
        import pyarrow.fs as pafs

        return pafs.PyFileSystem(pafs.FSSpecHandler(self._fs)), self._path("")

    def lease(self, rel: str, seconds: int) -> Any | None:
        """A blob lease on rel where the store has them (Azure), else None."""
        make = getattr(self._backend, "lease", None)
        return make(self._key(rel), seconds) if make is not None else None

    @property
    def compare_and_swap(self) -> bool:
        """True when the store can overwrite an object only if it is still at a known version (S3 If-Match)."""
        return hasattr(self._backend, "replace_if_match")

    def replace_if_match(self, rel: str, data: bytes, etag: str) -> bool | None:
        """Overwrite rel only if it is still at version etag; None where the store cannot do that."""
        replace = getattr(self._backend, "replace_if_match", None)
        if replace is None:
            return None
        with self._errors(f"write {self.uri(rel)}"):
            return bool(replace(self._key(rel), data, etag))

    def check(self) -> None:
        """Fail with one line when the container or bucket does not exist or cannot be reached."""
        what = f"open {self.location.uri}"
        try:
            self._backend.check_bucket()
        except StorageError:
            raise
        except Exception as exc:
            translated = self._backend.translate(exc, what)
            if translated is None:
                msg = f"cannot {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                translated = StorageError(msg[:400])
            raise translated from exc


def _mtime(info: dict[str, Any]) -> float | None:
    for key in ("last_modified", "LastModified", "mtime", "updated"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        if isinstance(value, int | float):
            return float(value)
    return None


def _etag(info: dict[str, Any]) -> str | None:
    value = info.get("etag") or info.get("ETag") or info.get("generation")
    return str(value).strip('"') if value is not None else None
