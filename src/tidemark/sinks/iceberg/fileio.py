"""pyiceberg's file access for a table on an object store, through tidemark's storage layer.

pyiceberg 0.12 cannot open `wasb(s)://container@account.blob.core.windows.net/...`, the form Spark writes on Azure
Blob: its fsspec FileIO hands the URI to adlfs, which strips only `abfs`/`abfss`/`az`, and its pyarrow FileIO reads
`container@account...` as the container. Its own credentials are properties (`s3.*`, `adls.*`), not the environment
tidemark's other I/O takes. So an object store's files are opened here as tidemark opens every other file there:
one store per container or bucket (`open_storage`, its credentials from the environment), read through pyarrow over
the store's fsspec file system. Local paths and HDFS go to pyiceberg's own pyarrow FileIO as before.
"""

from __future__ import annotations

import threading
from typing import Any

from pyiceberg.io import InputFile, OutputFile
from pyiceberg.io.pyarrow import ONE_MEGABYTE, PyArrowFile, PyArrowFileIO

from tidemark.storage import Location, StoreKind, open_storage, parse_location


class StoreFileIO(PyArrowFileIO):
    """pyiceberg's FileIO: object stores through tidemark's storage layer, the rest as pyiceberg's pyarrow FileIO."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(properties or {})
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _object_store(self, location: str) -> tuple[Any, str] | None:
        """The pyarrow file system of the location's container or bucket and its path there, None when the location
        is not on an object store tidemark opens."""
        if "://" not in location:
            return None
        where: Location = parse_location(location)
        if where.kind not in (StoreKind.AZURE, StoreKind.S3, StoreKind.GCS):
            return None
        root = where.root_uri
        with self._lock:
            fs = self._stores.get(root)
            if fs is None:
                fs, _ = open_storage(root).arrow()
                self._stores[root] = fs
        return fs, where.fs_path

    def new_input(self, location: str) -> PyArrowFile:
        """The file at location, to read."""
        found = self._object_store(location)
        if found is None:
            return super().new_input(location)
        return PyArrowFile(location=location, path=found[1], fs=found[0], buffer_size=ONE_MEGABYTE)

    def new_output(self, location: str) -> PyArrowFile:
        """The file at location, to write (tidemark's tools never write a table through pyiceberg)."""
        found = self._object_store(location)
        if found is None:
            return super().new_output(location)
        return PyArrowFile(location=location, path=found[1], fs=found[0], buffer_size=ONE_MEGABYTE)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Delete the file at location."""
        name = location.location if isinstance(location, (InputFile, OutputFile)) else location
        found = self._object_store(name)
        if found is None:
            super().delete(location)
            return
        found[0].delete_file(found[1])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its open stores and lock (pyiceberg pickles a FileIO into its worker processes)."""
        state = super().__getstate__()
        state.pop("_stores", None)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._stores = {}
        self._lock = threading.Lock()
