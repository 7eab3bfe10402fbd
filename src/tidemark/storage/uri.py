"""Storage URIs as Spark users write them: which store, which container or bucket, which key prefix."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from tidemark.compat import StrEnum
from tidemark.errors import StorageError


class StoreKind(StrEnum):
    """The kinds of storage tidemark reads and writes."""

    LOCAL = "local"
    AZURE = "azure"
    S3 = "s3"
    GCS = "gcs"
    HDFS = "hdfs"


_SCHEMES: dict[str, StoreKind] = {
    "abfss": StoreKind.AZURE,
    "abfs": StoreKind.AZURE,
    "wasbs": StoreKind.AZURE,
    "wasb": StoreKind.AZURE,
    "az": StoreKind.AZURE,
    "s3a": StoreKind.S3,
    "s3": StoreKind.S3,
    "s3n": StoreKind.S3,
    "gs": StoreKind.GCS,
    "gcs": StoreKind.GCS,
    "hdfs": StoreKind.HDFS,
    "viewfs": StoreKind.HDFS,
    "file": StoreKind.LOCAL,
}
SUPPORTED = (
    "abfss://container@account.dfs.core.windows.net/path, wasbs://container@account.blob.core.windows.net/path, "
    "s3a://bucket/path (or s3://), gs://bucket/path, hdfs://namenode/path, file:///path or a plain path"
)


@dataclass(frozen=True)
class Location:
    """Where a folder or file lives.

    `uri` is what Spark gets, unchanged but for a trailing slash; `bucket` is the Azure container,
    S3/GCS bucket or HDFS authority; `key` the path inside it without leading or trailing slashes
    (for local paths: the absolute OS path).
    """

    uri: str
    kind: StoreKind
    scheme: str
    bucket: str
    key: str
    account: str | None = None  # Azure storage account

    @property
    def is_local(self) -> bool:
        """True for plain paths and file: URIs."""
        return self.kind is StoreKind.LOCAL

    @property
    def fs_path(self) -> str:
        """The path as the fsspec file system of this store names it ("container/key", or the OS path)."""
        if self.is_local:
            return self.key
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def join(self, rel: str) -> Location:
        """The location of rel ('a/b') below this one."""
        rel = rel.strip("/")
        if not rel:
            return self
        if ".." in rel.split("/"):
            msg = f"refusing a path that leaves {self.uri}: {rel!r}"
            raise StorageError(msg)
        if self.is_local:
            key = os.path.join(self.key, *rel.split("/"))
            uri = key if not self.uri.startswith("file:") else f"file://{key}"
            return Location(uri, self.kind, self.scheme, "", key)
        key = f"{self.key}/{rel}" if self.key else rel
        return Location(f"{self.uri}/{rel}", self.kind, self.scheme, self.bucket, key, self.account)

    def relative_to(self, root: Location) -> str | None:
        """This location's path below root ('' for root itself), or None when it is not inside root."""
        if (self.kind, self.bucket, self.account) != (root.kind, root.bucket, root.account):
            return None
        if self.is_local:
            if self.key == root.key:
                return ""
            prefix = root.key.rstrip(os.sep) + os.sep
            return self.key[len(prefix) :].replace(os.sep, "/") if self.key.startswith(prefix) else None
        if not root.key:
            return self.key
        if self.key == root.key:
            return ""
        return self.key[len(root.key) + 1 :] if self.key.startswith(root.key + "/") else None

    @property
    def name(self) -> str:
        """The last path component."""
        return os.path.basename(self.key) if self.is_local else self.key.rsplit("/", 1)[-1]

    @property
    def root_uri(self) -> str:
        """The URI of the container, bucket or namenode ('' for local paths)."""
        if self.is_local:
            return ""
        return self.uri[: len(self.uri) - len(self.key) - 1] if self.key else self.uri

    @property
    def parent(self) -> Location:
        """The folder holding this location (itself at the root of a bucket)."""
        if self.is_local:
            parent = os.path.dirname(self.key) or self.key
            uri = parent if not self.uri.startswith("file:") else f"file://{parent}"
            return Location(uri, self.kind, self.scheme, "", parent)
        head = self.key.rsplit("/", 1)[0] if "/" in self.key else ""
        uri = f"{self.root_uri}/{head}" if head else self.root_uri
        return Location(uri, self.kind, self.scheme, self.bucket, head, self.account)

    @property
    def place(self) -> tuple[str, str, str, str]:
        """Where the data is, whatever the spelling: the store, account, container or bucket and key. The schemes
        that reach one store (`wasbs`/`abfs(s)` over one account and container, `s3`/`s3a`/`s3n`, a plain path and
        `file:`) and a trailing slash give the same place."""
        return (self.kind.value, self.account or "", self.bucket, self.key)

    def same_place(self, other: Location) -> bool:
        """True when both name the same folder or file (see `place`)."""
        return self.place == other.place

    def __str__(self) -> str:
        return self.uri


def _azure(uri: str, scheme: str, netloc: str, path: str) -> Location:
    if scheme == "az":
        # fsspec's own form: az://container/path (the account comes from the credentials).
        return Location(uri, StoreKind.AZURE, scheme, netloc, path)
    container, at, host = netloc.partition("@")
    if not at or not container or "." not in host:
        msg = (
            f"{uri} is not an Azure storage URI: write {scheme}://<container>@<account>.dfs.core.windows.net/<path> "
            f"(or .blob.core.windows.net for wasbs)"
        )
        raise StorageError(msg)
    account = host.split(".", 1)[0]
    return Location(uri, StoreKind.AZURE, scheme, container, path, account)


def parse_location(text: str) -> Location:
    """Parse a path or URI; an unknown scheme is a StorageError naming the supported ones."""
    raw = text.strip()
    if not raw:
        msg = "an empty path was given"
        raise StorageError(msg)
    parsed = urlparse(raw)
    scheme = parsed.scheme.lower()
    # A one-letter scheme is a Windows drive letter, not a URI.
    if not scheme or len(scheme) == 1:
        key = os.path.abspath(os.path.expanduser(raw))
        return Location(key, StoreKind.LOCAL, "", "", key)
    kind = _SCHEMES.get(scheme)
    if kind is None:
        msg = f"unsupported storage scheme {scheme!r} in {raw}: use {SUPPORTED}"
        raise StorageError(msg)
    if kind is StoreKind.LOCAL:
        key = os.path.abspath(unquote(parsed.path))
        return Location(f"file://{key}", kind, scheme, "", key)
    userinfo = parsed.netloc.rpartition("@")[0]
    if parsed.query or parsed.fragment or ":" in userinfo:
        # Keys and tokens belong in the environment: a path is printed, logged and written into reports.
        msg = f"{scheme}:// paths must not carry keys or query strings: set credentials in the environment"
        raise StorageError(msg)
    path = parsed.path.strip("/")
    uri = raw.rstrip("/") if path else f"{scheme}://{parsed.netloc}"
    if not parsed.netloc:
        msg = f"{raw} names no container, bucket or namenode: use {SUPPORTED}"
        raise StorageError(msg)
    if kind is StoreKind.AZURE:
        return _azure(uri, scheme, parsed.netloc, path)
    return Location(uri, kind, scheme, parsed.netloc, path)


def is_local(text: str) -> bool:
    """True for plain paths and file: URIs; False for hdfs://, s3a://, abfss:// and the like."""
    scheme = urlparse(text).scheme
    return scheme in ("", "file") or len(scheme) == 1
