"""One storage layer under everything tidemark reads or writes itself: local disks, Azure, S3, GCS and HDFS."""

from __future__ import annotations

from tidemark.storage.base import DirListing, FileEntry, Storage, Walker, join
from tidemark.storage.open import Backend, open_storage
from tidemark.storage.uri import Location, StoreKind, is_local, parse_location

__all__ = [
    "Backend",
    "DirListing",
    "FileEntry",
    "Location",
    "Storage",
    "StoreKind",
    "Walker",
    "is_local",
    "join",
    "open_storage",
    "parse_location",
]
