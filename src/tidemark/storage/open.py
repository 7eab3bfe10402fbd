"""Open the store behind a path or URI: one file system per root, checked once, passed down to everything."""

from __future__ import annotations

import threading
from typing import Any, Literal

from tidemark.errors import StorageError
from tidemark.storage.base import Storage
from tidemark.storage.credentials import azure_access, gcs_options, s3_options
from tidemark.storage.local import LocalFS
from tidemark.storage.objectstore import ObjectStore
from tidemark.storage.uri import Location, StoreKind, parse_location

Backend = Literal["auto", "local", "hadoop"]
_EXTRAS = {StoreKind.AZURE: ("adlfs", "azure"), StoreKind.S3: ("s3fs", "s3"), StoreKind.GCS: ("gcsfs", "gcs")}
_checked: set[tuple[str, str, str | None]] = set()
_lock = threading.Lock()


def _import(kind: StoreKind) -> Any:
    module, extra = _EXTRAS[kind]
    try:
        return __import__(module)
    except ImportError as exc:
        msg = f"{kind.value} paths need the {extra!r} extra: pip install 'tidemark[{extra}]'"
        raise StorageError(msg) from exc


def _object_store(location: Location) -> ObjectStore:
    backend: Any
    if location.kind is StoreKind.AZURE:
        adlfs = _import(StoreKind.AZURE)
        from tidemark.storage.azure import AzureBackend  # after the extra's check: it imports the SDK

        access = azure_access(location)
        fs = adlfs.AzureBlobFileSystem(**access.fsspec_options(), skip_instance_cache=True)
        backend = AzureBackend(location, access)
    elif location.kind is StoreKind.S3:
        from tidemark.storage.s3 import S3Backend

        s3fs = _import(StoreKind.S3)
        fs = s3fs.S3FileSystem(**s3_options(), skip_instance_cache=True)
        backend = S3Backend(location, fs)
    else:
        from tidemark.storage.gcs import GcsBackend

        gcsfs = _import(StoreKind.GCS)
        try:
            fs = gcsfs.GCSFileSystem(**gcs_options(), skip_instance_cache=True)
        except Exception as exc:  # gcsfs looks for credentials when it is made, not at the first request
            translated = GcsBackend(location, None).translate(exc, f"open {location.uri}")
            if translated is None:
                raise
            raise translated from exc
        backend = GcsBackend(location, fs)
    return ObjectStore(location, fs, backend)


def open_storage(path: str | Location, backend: Backend = "auto", spark: Any | None = None) -> Storage:
    """The store of a path or URI (plain paths and file: locally; hdfs: through the Spark JVM; the rest via fsspec).

    Each call makes a new client with the credentials the environment has now: open a root once and pass the
    store down.
    The container or bucket is checked once per process, so a typo is one line, not a stack trace later.
    """
    location = path if isinstance(path, Location) else parse_location(path)
    if backend == "hadoop" or location.kind is StoreKind.HDFS:
        from tidemark.storage.hadoop import HadoopFS

        return HadoopFS(location, spark)
    if location.is_local or backend == "local":
        return LocalFS(location)
    store = _object_store(location)
    key = (location.kind.value, location.bucket, location.account)
    with _lock:
        fresh = key not in _checked
    if fresh:
        store.check()
        with _lock:
            _checked.add(key)
    return store
