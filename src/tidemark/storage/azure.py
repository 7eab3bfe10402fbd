"""Azure Blob Storage and ADLS Gen2 (abfss://, wasbs://, az://): adlfs for files, the blob SDK for lists and leases."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from tidemark.errors import StorageError
from tidemark.storage.azure_list import fetch_page, is_folder_marker, next_marker_of, parse_page, raw_sender
from tidemark.storage.base import FileEntry
from tidemark.storage.credentials import AZURE_HINT, AzureAccess
from tidemark.storage.uri import Location

PAGE_SIZE = 5000  # the most one List Blobs request returns
BATCH_SIZE = 256  # the most one Blob Batch request carries
# Blob Batch requests in flight at once: each waits on the service for ~1 s at 256 deletes (Azurite on MariaDB, a
# real account alike), so a prune of 180,000 blobs is 700 requests: 10 minutes one at a time.
BATCH_THREADS = 8


class AzureBackend:
    """One container of one storage account."""

    def __init__(self, location: Location, access: AzureAccess) -> None:
        self.location = location
        self.access = access
        self._container: Any = None

    @property
    def container(self) -> Any:
        """The synchronous ContainerClient (made on first use)."""
        if self._container is None:
            self._container = self.access.service_client().get_container_client(self.location.bucket)
        return self._container

    def list_pages(self, prefix: str, delimiter: bool) -> Iterator[tuple[list[FileEntry], list[str]]]:
        """List Blobs, 5,000 names a request; with delimiter, one level (sub-prefixes as BlobPrefix items).

        Pages are parsed from the XML (azure_list), and the next page is requested as soon as this one has
        arrived, so its round trip overlaps this one's parsing (one request ahead, never more; a listing
        abandoned early costs that one). A page that is not a 200 answer, or an SDK without a request sender,
        goes through the SDK's own call from the same marker, so its errors keep their types.
        """
        send = raw_sender(self.container)
        marker = ""
        if send is not None:
            with ThreadPoolExecutor(1, thread_name_prefix="tidemark-list") as ahead:

                def ask(at: str) -> Future[tuple[int, bytes]]:
                    return ahead.submit(fetch_page, self.container, send, prefix, delimiter, PAGE_SIZE, at)

                pending = ask(marker)
                while True:
                    status, body = pending.result()
                    if status != 200:
                        break
                    guessed = next_marker_of(body)
                    if guessed:
                        pending = ask(guessed)
                    page = parse_page(body)
                    if page.next_marker != guessed:  # cannot happen with the service's XML; never trust a guess
                        with suppress(Exception):
                            pending.result()  # the request on the wrong marker: waited for, its answer ignored
                        if page.next_marker:
                            pending = ask(page.next_marker)
                    yield page.files, page.prefixes
                    if not page.next_marker:
                        return
                    marker = page.next_marker
        yield from self._sdk_pages(prefix, delimiter, marker)

    def _sdk_pages(self, prefix: str, delimiter: bool, marker: str) -> Iterator[tuple[list[FileEntry], list[str]]]:
        if delimiter:
            listing = self.container.walk_blobs(
                name_starts_with=prefix, delimiter="/", include=["metadata"], results_per_page=PAGE_SIZE
            )
        else:
            listing = self.container.list_blobs(
                name_starts_with=prefix, include=["metadata"], results_per_page=PAGE_SIZE
            )
        for page in listing.by_page(continuation_token=marker or None):
            files: list[FileEntry] = []
            prefixes: list[str] = []
            for item in page:
                name = str(item.name)
                if not hasattr(item, "size"):  # a BlobPrefix: a "folder" one level down
                    prefixes.append(name)
                    continue
                if is_folder_marker(name, (item.metadata or {}).get("hdi_isfolder")):
                    continue
                modified = item.last_modified
                files.append(
                    FileEntry(
                        name,
                        int(item.size or 0),
                        modified.timestamp() if modified else None,
                        str(item.etag).strip('"') if item.etag else None,
                    )
                )
            yield files, prefixes

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Upload only if no blob has this name (If-None-Match: *)."""
        from azure.core.exceptions import ResourceExistsError

        try:
            self.container.get_blob_client(key).upload_blob(data, overwrite=False)
        except ResourceExistsError:
            return False
        return True

    def delete_many(self, keys: list[str]) -> list[str]:
        """Delete blobs with the Blob Batch API (256 a request, BATCH_THREADS at once); return the missing keys.

        An account that refuses batches (some with a hierarchical namespace) gets one delete a blob instead.
        """
        chunks = [keys[start : start + BATCH_SIZE] for start in range(0, len(keys), BATCH_SIZE)]
        if len(chunks) <= 1:
            return self._delete_chunk(chunks[0]) if chunks else []
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(BATCH_THREADS, len(chunks))) as pool:
            return [key for missing in pool.map(self._delete_chunk, chunks) for key in missing]

    def _delete_chunk(self, chunk: list[str]) -> list[str]:
        """One Blob Batch request (or one delete a blob where batches are refused); the keys that were not there."""
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        missing: list[str] = []
        try:
            answers = list(self.container.delete_blobs(*chunk, raise_on_any_failure=False))
        except HttpResponseError as exc:
            if getattr(exc, "status_code", None) in (401, 403, 404):
                raise
            answers = []
        if len(answers) != len(chunk):  # no batch here: one request a blob
            for key in chunk:
                try:
                    self.container.delete_blob(key)
                except ResourceNotFoundError:
                    missing.append(key)
            return missing
        for key, answer in zip(chunk, answers, strict=True):
            status = int(getattr(answer, "status_code", 0) or 0)
            if status == 404:
                missing.append(key)
            elif status >= 300:
                msg = f"deleting {key} in container {self.location.bucket!r} failed with HTTP {status}"
                raise StorageError(msg)
        return missing

    def lease(self, key: str, seconds: int) -> AzureLease:
        """A lease on one blob (made on acquire)."""
        return AzureLease(self, key, seconds)

    def check_bucket(self) -> None:
        """One request: does the container exist and can we reach it?"""
        self.container.get_container_properties()

    def translate(self, exc: BaseException, what: str) -> StorageError | None:
        """Missing container, credentials or endpoint as one line (never with a secret in it)."""
        name = type(exc).__name__
        raw_code = getattr(exc, "error_code", "") or ""
        code = str(getattr(raw_code, "value", raw_code))  # the SDK gives a StorageErrorCode enum or a string
        account = self.access.account
        if code in ("ContainerNotFound", "ContainerBeingDeleted") or "ContainerNotFound" in str(exc):
            return StorageError(
                f"container {self.location.bucket!r} does not exist in storage account {account!r}: "
                "create it or fix the path"
            )
        if name == "ClientAuthenticationError" or code in ("AuthenticationFailed", "AuthorizationFailure"):
            return StorageError(
                f"cannot {what}: Azure refused the credentials for storage account {account!r} from "
                f"{self.access.source} (HTTP 403: a wrong or rotated key, or an expired SAS token): correct it"
            )
        if name == "CredentialUnavailableError":
            return StorageError(f"cannot {what}: no Azure credentials found; {AZURE_HINT}")
        if code in ("AuthorizationPermissionMismatch", "AuthorizationResourceTypeMismatch"):
            return StorageError(f"cannot {what}: the credentials lack permission on container {self.location.bucket!r}")
        if name in ("ServiceRequestError", "ServiceResponseError", "ClientConnectorError") or isinstance(
            exc, ConnectionError
        ):
            return StorageError(f"cannot {what}: the blob endpoint {self.access.blob_endpoint} did not answer")
        if name == "HttpResponseError":
            return StorageError(f"cannot {what}: Azure answered {code or 'an error'}")
        return None


class AzureLease:
    """A blob lease: while held, no other writer can write, delete or lease the blob."""

    def __init__(self, backend: AzureBackend, key: str, duration_seconds: int) -> None:
        self._blob = backend.container.get_blob_client(key)
        self._duration = duration_seconds
        self._lease: Any = None

    def acquire(self, data: bytes) -> bool:
        """Create the blob if needed, take the lease and write data under it; False when another holds it."""
        from azure.core.exceptions import HttpResponseError, ResourceExistsError

        try:
            self._blob.upload_blob(data, overwrite=False)
        except ResourceExistsError:
            pass
        except HttpResponseError as exc:
            if getattr(exc, "error_code", None) != "LeaseIdMissing":
                raise
        try:
            self._lease = self._blob.acquire_lease(lease_duration=self._duration)
        except HttpResponseError as exc:
            if getattr(exc, "error_code", None) in ("LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation"):
                return False
            raise
        self.write(data)
        return True

    def break_dead(self, etag: str | None) -> None:
        """End another holder's lease now (its holder is known dead), only if the blob is still at etag."""
        from azure.core import MatchConditions
        from azure.storage.blob import BlobLeaseClient

        quoted = etag if etag is None or etag.startswith('"') else f'"{etag}"'  # listings hand it out unquoted
        condition: dict[str, Any] = {"etag": quoted, "match_condition": MatchConditions.IfNotModified} if etag else {}
        BlobLeaseClient(self._blob).break_lease(lease_break_period=0, **condition)

    def write(self, data: bytes) -> None:
        """Renew the lease and rewrite the blob under it."""
        self._lease.renew()
        self._blob.upload_blob(data, overwrite=True, lease=self._lease)

    def release(self) -> None:
        """Delete the blob under the lease (which ends it)."""
        from azure.core.exceptions import HttpResponseError

        if self._lease is None:
            return
        try:
            self._blob.delete_blob(lease=self._lease)
        except HttpResponseError:
            self._lease.release()
        self._lease = None
