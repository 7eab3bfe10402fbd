"""Any Hadoop file system (hdfs://, viewfs://, or file:// on request) through the Spark JVM's FileSystem API."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from tidemark.errors import StorageError
from tidemark.storage.base import DirListing, FileEntry, Walker, join, walk_folders
from tidemark.storage.uri import Location, parse_location


class HadoopFS:
    """A folder on a Hadoop file system, reached through py4j (about 5 round trips per file listed)."""

    def __init__(self, root: str | Location, spark: Any | None = None) -> None:
        from tidemark.session import build_session  # pyspark only on this path

        self.location = root if isinstance(root, Location) else parse_location(root)
        from tidemark.connect import refuse_on_connect

        session: Any = spark if spark is not None else build_session()
        refuse_on_connect(session, f"{self.location.uri}'s Hadoop file system", "read it where a local Spark runs")
        jvm: Any = session._jvm
        self._jvm = jvm
        self.root = self.location.uri
        self._root_path = jvm.org.apache.hadoop.fs.Path(self.root)
        try:
            fs = self._root_path.getFileSystem(session._jsc.hadoopConfiguration())
        except Exception as exc:  # an unknown namenode, a scheme with no Hadoop file system on the classpath
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            msg = (
                f"cannot open {self.root}: {reason} (check the namenode address, and that HADOOP_CONF_DIR points at "
                "the cluster's Hadoop configuration)"
            )
            raise StorageError(msg) from exc
        # The checksum file system of file: URIs hides .crc files from listings; they are files we count and prune.
        from py4j.java_gateway import is_instance_of  # type: ignore[import-untyped]

        if is_instance_of(session.sparkContext._gateway, fs, "org.apache.hadoop.fs.ChecksumFileSystem"):
            fs = fs.getRawFileSystem()
        self._fs = fs
        self.walker: Walker = "hadoop"
        self.list_requests = 0

    def uri(self, rel: str = "") -> str:
        """The URI of rel."""
        return self.location.join(rel).uri

    def _path(self, rel: str) -> Any:
        if rel.startswith("/") or ".." in rel.split("/"):
            msg = f"refusing to touch {rel!r}: it is outside {self.root}"
            raise StorageError(msg)
        return self._jvm.org.apache.hadoop.fs.Path(self._root_path, rel) if rel else self._root_path

    def walk(self, rel: str = "", exclude: frozenset[str] = frozenset()) -> Iterator[DirListing]:
        """Every folder under rel, one listStatus call per folder."""
        return walk_folders(self.list_dir, rel, exclude)

    def list_dir(self, rel: str) -> DirListing | None:
        """One folder, or None when it does not exist."""
        path = self._path(rel)
        if not self._fs.exists(path):
            return None
        self.list_requests += 1
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

    def list_files(self, rel: str = "") -> Iterator[FileEntry]:
        """Every file below rel (one listStatus per folder)."""
        for listing in self.walk(rel):
            for name, _size in sorted(listing.files):
                entry = self.stat(join(listing.rel, name))
                if entry is not None:
                    yield entry

    def stat(self, rel: str) -> FileEntry | None:
        """One file's entry, or None when it does not exist or is a folder."""
        path = self._path(rel)
        if not self._fs.exists(path):
            return None
        status = self._fs.getFileStatus(path)
        if status.isDirectory():
            return None
        mtime = int(status.getModificationTime())
        return FileEntry(rel, int(status.getLen()), mtime / 1000, f"{mtime}-{status.getLen()}")

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

    def open_read(self, rel: str) -> BinaryIO:
        """The whole file in memory (Hadoop streams do not cross py4j cheaply)."""
        data = self.read_bytes(rel)
        if data is None:
            raise FileNotFoundError(self.uri(rel))
        return io.BytesIO(data)

    def write_atomic(self, rel: str, data: bytes, *, exclusive: bool = False) -> bool:
        """Write a temp file then rename it (rename does not overwrite, so exclusive holds)."""
        target = self._path(rel)
        folder, _, name = rel.rpartition("/")
        temp = self._path(f"{folder}/.{name}.{os.getpid()}.tmp" if folder else f".{name}.{os.getpid()}.tmp")
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

    def delete_files(self, rels: list[str]) -> list[str]:
        """Remove these files one by one; return those that were not files."""
        missing: list[str] = []
        for rel in rels:
            path = self._path(rel)
            if self._fs.exists(path) and not self._fs.getFileStatus(path).isDirectory():
                self._fs.delete(path, False)
            else:
                missing.append(rel)
        return missing

    def exists(self, rel: str) -> bool:
        """True when the path exists."""
        return bool(self._fs.exists(self._path(rel)))

    def rename(self, source: str, target: str) -> None:
        """Move a file or folder (Hadoop's rename; its parent folder is created first)."""
        dst = self._path(target)
        self._fs.mkdirs(dst.getParent())
        if not self._fs.rename(self._path(source), dst):
            msg = f"cannot move {self.uri(source)} to {self.uri(target)}"
            raise StorageError(msg)

    def download(self, rel: str, local_path: str) -> int:
        """Copy one file to a local path."""
        data = self.read_bytes(rel)
        if data is None:
            raise FileNotFoundError(self.uri(rel))
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        with open(local_path, "wb") as handle:
            handle.write(data)
        return len(data)

    def arrow(self) -> tuple[Any, str]:
        """pyarrow's HDFS client (needs libhdfs and a Hadoop CLASSPATH on this machine)."""
        import pyarrow.fs as pafs

        try:
            filesystem, path = pafs.FileSystem.from_uri(self.root)
        except Exception as exc:
            msg = f"reading Parquet on {self.root} needs pyarrow's HDFS client (libhdfs, HADOOP_HOME): {exc}"
            raise StorageError(msg) from exc
        return filesystem, path
