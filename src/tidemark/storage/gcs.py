"""Google Cloud Storage (gs://) through gcsfs; listings through fsspec (no emulator here to prove them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tidemark.errors import StorageError
from tidemark.storage.base import FileEntry
from tidemark.storage.credentials import GCS_HINT
from tidemark.storage.uri import Location


class GcsBackend:
    """One bucket, through a gcsfs file system."""

    def __init__(self, location: Location, fs: Any) -> None:
        self.location = location
        self._fs = fs

    def list_pages(self, prefix: str, delimiter: bool) -> Iterator[tuple[list[FileEntry], list[str]]]:
        """gcsfs pages internally (1,000 names a request); it yields here as one page."""
        path = f"{self.location.bucket}/{prefix}".rstrip("/")
        infos = self._fs.ls(path, detail=True) if delimiter else list(self._fs.find(path, detail=True).values())
        files = [
            FileEntry(
                str(info["name"]).split("/", 1)[1],
                int(info.get("size") or 0),
                None,
                str(info.get("generation") or "") or None,
            )
            for info in infos
            if info.get("type") != "directory"
        ]
        dirs = [str(i["name"]).split("/", 1)[1] + "/" for i in infos if i.get("type") == "directory"]
        yield files, dirs

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Upload only if the object does not exist (generation precondition 0)."""
        path = f"{self.location.bucket}/{key}"
        try:
            self._fs.pipe_file(path, data, fixed_key_metadata=None, ifGenerationMatch=0)
        except (FileExistsError, OSError) as exc:
            if isinstance(exc, FileExistsError) or "412" in str(exc) or "conditionNotMet" in str(exc):
                return False
            raise
        return True

    def check_bucket(self) -> None:
        """Does the bucket exist?"""
        if not self._fs.exists(self.location.bucket):
            raise FileNotFoundError(self.location.bucket)

    def translate(self, exc: BaseException, what: str) -> StorageError | None:
        """Missing bucket or credentials as one line."""
        text = str(exc)
        if what.startswith("open") and isinstance(exc, FileNotFoundError):
            return StorageError(f"bucket {self.location.bucket!r} does not exist: create it or fix the path")
        if "DefaultCredentialsError" in type(exc).__name__ or "credentials" in text.lower():
            return StorageError(f"cannot {what}: no Google credentials found; {GCS_HINT}")
        if isinstance(exc, PermissionError) or "403" in text:
            return StorageError(f"cannot {what}: Google Cloud Storage refused access")
        return None
