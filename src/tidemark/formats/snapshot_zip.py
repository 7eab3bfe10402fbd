"""A RocksDB snapshot zip (`<version>.zip` in a state store folder): its `metadata` entry, read in one place.

The entry is a version line (`v1`) and one JSON object: the SST and log files the snapshot needs (`sstFiles`,
`logFiles`, each with its `dfs...FileName` and `sizeBytes`), `numKeys` and, from Spark 4.0, `columnFamilyMapping`.
Only the zip's central directory and that entry are read, so a seekable file is streamed, not loaded.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any, BinaryIO

METADATA_ENTRY = "metadata"
# A real entry lists files by name: far below this even for thousands of SST files.
MAX_ZIP_METADATA_BYTES = 64 * 1024**2


def snapshot_metadata(data: bytes | BinaryIO) -> dict[str, Any]:
    """The JSON object of the zip's metadata entry; ValueError, KeyError or BadZipFile when it is not RocksDB's."""
    with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as archive:
        if archive.getinfo(METADATA_ENTRY).file_size > MAX_ZIP_METADATA_BYTES:
            msg = "its metadata entry is too large to be RocksDB's"
            raise ValueError(msg)
        text = archive.read(METADATA_ENTRY).decode()
    lines = [line for line in text.splitlines() if line.strip()]
    meta = json.loads(lines[1] if lines[0].startswith("v") else lines[0])
    if not isinstance(meta, dict):
        msg = "its metadata is not a JSON object"
        raise ValueError(msg)
    return meta


def zip_references(data: bytes | BinaryIO) -> set[str]:
    """The SST and log file names a snapshot zip lists in its metadata (the shared files it needs)."""
    meta = snapshot_metadata(data)
    names = {str(f["dfsSstFileName"]) for f in meta.get("sstFiles", [])}
    names |= {str(f["dfsLogFileName"]) for f in meta.get("logFiles", [])}
    return names
