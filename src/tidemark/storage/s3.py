"""Amazon S3 and S3-compatible stores (s3a://, s3://): s3fs for files, ListObjectsV2 pages counted one by one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tidemark.errors import StorageError
from tidemark.storage.base import FileEntry
from tidemark.storage.credentials import AWS_HINT
from tidemark.storage.uri import Location

PAGE_SIZE = 1000  # the most one ListObjectsV2 request returns
COPY_OBJECT_LIMIT = 5 * 1024**3  # the largest object one CopyObject copies (a larger one goes in parts)


class S3Backend:
    """One bucket, through an s3fs file system (its botocore client does the requests)."""

    def __init__(self, location: Location, fs: Any) -> None:
        self.location = location
        self._fs = fs

    def list_pages(self, prefix: str, delimiter: bool) -> Iterator[tuple[list[FileEntry], list[str]]]:
        """ListObjectsV2, 1,000 keys a request; with delimiter, one level (CommonPrefixes)."""
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": prefix, "MaxKeys": PAGE_SIZE}
            if delimiter:
                args["Delimiter"] = "/"
            if token:
                args["ContinuationToken"] = token
            page = self._fs.call_s3("list_objects_v2", **args)
            files = [
                FileEntry(
                    str(item["Key"]),
                    int(item.get("Size", 0)),
                    item["LastModified"].timestamp() if item.get("LastModified") else None,
                    str(item.get("ETag", "")).strip('"') or None,
                )
                for item in page.get("Contents", [])
                if not str(item["Key"]).endswith("/")
            ]
            yield files, [str(p["Prefix"]) for p in page.get("CommonPrefixes", [])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def copy_key(self, source: str, target: str, size: int) -> bool:
        """CopyObject within the bucket, one request (s3fs's copy first asks HeadObject for the size); False for an
        object too large for one CopyObject (s3fs copies it in parts)."""
        if size >= COPY_OBJECT_LIMIT:
            return False
        bucket = self.location.bucket
        self._fs.call_s3("copy_object", Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": source})
        return True

    def delete_keys(self, keys: list[str]) -> None:
        """DeleteObjects, 1,000 keys a request (s3fs); a missing key is no error, and is not reported."""
        if any(char in key for key in keys for char in "*?["):  # s3fs would read them as a glob
            for key in keys:
                self._fs.call_s3("delete_object", Bucket=self.location.bucket, Key=key)
        elif keys:
            self._fs.rm([f"{self.location.bucket}/{key}" for key in keys])

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """PutObject with If-None-Match: * (S3 conditional writes)."""
        try:
            self._fs.call_s3("put_object", Bucket=self.location.bucket, Key=key, Body=data, IfNoneMatch="*")
        except FileExistsError:
            return False
        except OSError as exc:
            if "pre-condition" in str(exc) or "PreconditionFailed" in str(exc):
                return False
            raise
        return True

    def replace_if_match(self, key: str, data: bytes, etag: str) -> bool:
        """PutObject with If-Match: only if the object is still the version we read."""
        try:
            self._fs.call_s3("put_object", Bucket=self.location.bucket, Key=key, Body=data, IfMatch=f'"{etag}"')
        except (FileExistsError, FileNotFoundError):
            return False
        except OSError as exc:
            if "pre-condition" in str(exc) or "PreconditionFailed" in str(exc):
                return False
            raise
        return True

    def check_bucket(self) -> None:
        """One request: does the bucket exist and can we reach it?"""
        self._fs.call_s3("head_bucket", Bucket=self.location.bucket)

    def translate(self, exc: BaseException, what: str) -> StorageError | None:
        """Missing bucket, credentials or endpoint as one line."""
        name = type(exc).__name__
        text = str(exc)
        missing = isinstance(exc, FileNotFoundError) or "404" in text
        if "NoSuchBucket" in text or "bucket does not exist" in text or (what.startswith("open") and missing):
            return StorageError(f"bucket {self.location.bucket!r} does not exist: create it or fix the path")
        if name in ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError"):
            return StorageError(f"cannot {what}: no AWS credentials found; {AWS_HINT}")
        if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text or "403" in text:
            return StorageError(
                f"cannot {what}: S3 refused access to bucket {self.location.bucket!r} (HTTP 403): check "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and the bucket policy"
            )
        if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError") or isinstance(
            exc, ConnectionError
        ):
            return StorageError(f"cannot {what}: the S3 endpoint did not answer (check AWS_ENDPOINT_URL, the network)")
        return None
