"""A location as the Rust `object_store` crate takes it (delta-rs, and any library built on it): a URI and options.

The credentials are the ones tidemark's own storage layer reads (storage/credentials.py), handed over as options,
never logged. `wasbs://` and `abfs(s)://` over one account and container reach the same blobs, so both become the
account's Blob endpoint; an emulator (a connection string's path-style BlobEndpoint, Azurite) is reached in
object_store's emulator mode.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from tidemark.errors import StorageError
from tidemark.storage.credentials import azure_access, parse_connection_string, s3_options
from tidemark.storage.uri import Location, StoreKind

EMULATOR_URL = "AZURITE_BLOB_STORAGE_URL"  # object_store's emulator mode reads the server's address here


def object_store_target(location: Location, environ: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """(uri, storage options) for object_store; a store it cannot reach is a StorageError naming it."""
    if location.is_local:
        return location.key, {}
    if location.kind is StoreKind.S3:
        options = {k: str(v) for k, v in s3_options(environ).items() if k == "endpoint_url"}
        endpoint = options.pop("endpoint_url", None)
        if endpoint:
            options["aws_endpoint_url"] = endpoint
            if endpoint.startswith("http://"):
                options["allow_http"] = "true"
        env = os.environ if environ is None else environ
        options.setdefault("aws_region", env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")
        # A commit (Delta's RESTORE) is created only if absent, by S3's conditional write (If-None-Match), as
        # tidemark's own storage layer does: no lock table needed.
        options["aws_conditional_put"] = "etag"
        return f"s3://{location.bucket}/{location.key}".rstrip("/"), options
    if location.kind is StoreKind.AZURE:
        return _azure(location, environ)
    msg = f"{location.uri}: delta-rs reads local folders, s3:// and Azure (wasbs://, abfs(s)://) here, not {location.scheme}://"
    raise StorageError(msg)


def _azure(location: Location, environ: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    access = azure_access(location, environ)
    uri = f"az://{location.bucket}/{location.key}".rstrip("/")
    options = {"account_name": access.account}
    if access.connection_string is not None:
        parts = parse_connection_string(access.connection_string)
        if parts.get("AccountKey"):
            options["account_key"] = parts["AccountKey"]
        elif parts.get("SharedAccessSignature"):
            options["sas_token"] = parts["SharedAccessSignature"]
    elif access.account_key is not None:
        options["account_key"] = access.account_key
    elif access.sas_token is not None:
        options["sas_token"] = access.sas_token
    endpoint = urlsplit(access.blob_endpoint)
    if endpoint.path.strip("/") == access.account:
        # A path-style endpoint (http://127.0.0.1:10000/devstoreaccount1) is an emulator's. object_store writes a
        # commit (a copy if absent) right only in its emulator mode, which takes the server from this variable.
        options["use_emulator"] = "true"
        os.environ[EMULATOR_URL] = f"{endpoint.scheme}://{endpoint.netloc}"
        options["allow_http"] = "true"
    elif access.blob_endpoint.rstrip("/") != f"https://{access.account}.blob.core.windows.net":
        options["endpoint"] = access.blob_endpoint
    return uri, options
