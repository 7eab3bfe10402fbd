"""Credentials the way each cloud's own tools take them, read from the environment and never printed.

Azure: AZURE_STORAGE_CONNECTION_STRING (its BlobEndpoint wins, so an emulator works), else an account key
(AZURE_STORAGE_ACCOUNT_KEY, account from the URI or AZURE_STORAGE_ACCOUNT_NAME), else a SAS token
(AZURE_STORAGE_SAS_TOKEN), else DefaultAzureCredential. AWS: botocore's own chain (AWS_ACCESS_KEY_ID,
AWS_PROFILE, instance roles...) plus AWS_ENDPOINT_URL(_S3). Google: application default credentials.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tidemark.errors import StorageError
from tidemark.secrets import remember
from tidemark.storage.uri import Location

CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_NAME = "AZURE_STORAGE_ACCOUNT_NAME"
ACCOUNT_KEY = "AZURE_STORAGE_ACCOUNT_KEY"
SAS_TOKEN = "AZURE_STORAGE_SAS_TOKEN"  # noqa: S105 - the variable's name, not a token
AZURE_HINT = (
    f"set {CONNECTION_STRING}, or {ACCOUNT_KEY} (with the account in the path), or {SAS_TOKEN}, "
    "or sign in for DefaultAzureCredential (az login, a managed identity, or AZURE_CLIENT_ID/AZURE_TENANT_ID/"
    "AZURE_CLIENT_SECRET)"
)
STORAGE_SCOPE = "https://storage.azure.com/.default"
AWS_HINT = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or run with an instance role)"
GCS_HINT = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run `gcloud auth application-default login`"
)


def parse_connection_string(text: str) -> dict[str, str]:
    """The key=value pairs of an Azure Storage connection string."""
    pairs: dict[str, str] = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            pairs[key.strip()] = value.strip()
    return pairs


@dataclass(frozen=True)
class AzureAccess:
    """How to reach one Azure storage account; repr never shows a secret."""

    account: str
    blob_endpoint: str
    method: str  # "connection-string", "account-key", "sas-token", "default-credential"
    connection_string: str | None = field(default=None, repr=False)
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        """Where these credentials came from, as the user set them (a variable's name, never its value)."""
        return {
            "connection-string": CONNECTION_STRING,
            "account-key": ACCOUNT_KEY,
            "sas-token": SAS_TOKEN,
        }.get(self.method, "DefaultAzureCredential (az login, a managed identity, or AZURE_CLIENT_ID/...)")

    def fsspec_options(self) -> dict[str, Any]:
        """Keyword arguments for adlfs.AzureBlobFileSystem."""
        if self.connection_string is not None:
            return {"connection_string": self.connection_string}
        options: dict[str, Any] = {"account_name": self.account, "account_host": _host(self.blob_endpoint)}
        if self.account_key is not None:
            options["account_key"] = self.account_key
        elif self.sas_token is not None:
            options["sas_token"] = self.sas_token
        else:
            options["anon"] = False  # adlfs then uses DefaultAzureCredential
        return options

    def service_client(self) -> Any:
        """A synchronous azure.storage.blob BlobServiceClient for listing and leases (few, short retries)."""
        from azure.storage.blob import BlobServiceClient

        # The SDK's default is 10 retries with exponential backoff: minutes before a wrong endpoint says so.
        retries: dict[str, Any] = {"retry_total": 3, "retry_connect": 2, "connection_timeout": 20, "read_timeout": 120}
        if self.connection_string is not None:
            return BlobServiceClient.from_connection_string(self.connection_string, **retries)
        credential: Any
        if self.account_key is not None:
            credential = {"account_name": self.account, "account_key": self.account_key}
        elif self.sas_token is not None:
            credential = self.sas_token
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                msg = "Azure sign-in needs azure-identity: pip install 'tidemark[azure]'"
                raise StorageError(msg) from exc
            credential = DefaultAzureCredential()
            try:
                # Ask for a token once, up front: the storage client would retry a missing sign-in for minutes.
                credential.get_token(STORAGE_SCOPE)
            except Exception as exc:
                msg = f"no Azure credentials found for account {self.account!r}: {AZURE_HINT}"
                raise StorageError(msg) from exc
        return BlobServiceClient(self.blob_endpoint, credential=credential, **retries)


def _host(endpoint: str) -> str:
    return endpoint.split("://", 1)[-1].split("/", 1)[0]


def azure_access(location: Location, environ: dict[str, str] | None = None) -> AzureAccess:
    """Resolve how to reach the account of an Azure location, or raise a StorageError naming what to set."""
    env = dict(os.environ if environ is None else environ)
    account = location.account or env.get(ACCOUNT_NAME)
    connection = env.get(CONNECTION_STRING)
    if connection:
        parts = parse_connection_string(connection)
        named = parts.get("AccountName")
        if account and named and named != account:
            msg = (
                f"{CONNECTION_STRING} is for storage account {named!r} but {location.uri} names account "
                f"{account!r}: use a path in account {named!r} or a connection string for {account!r}"
            )
            raise StorageError(msg)
        account = named or account
        if not account:
            msg = f"{CONNECTION_STRING} names no AccountName: copy the whole connection string from the portal"
            raise StorageError(msg)
        endpoint = parts.get("BlobEndpoint") or (
            f"{parts.get('DefaultEndpointsProtocol', 'https')}://{account}.blob."
            f"{parts.get('EndpointSuffix', 'core.windows.net')}"
        )
        remember(connection)
        return AzureAccess(account, endpoint.rstrip("/"), "connection-string", connection_string=connection)
    if not account:
        msg = f"{location.uri} names no storage account: write the container@account form, or set {ACCOUNT_NAME}"
        raise StorageError(msg)
    endpoint = f"https://{account}.blob.core.windows.net"
    remember(*(env[name] for name in (ACCOUNT_KEY, SAS_TOKEN) if env.get(name)))
    if env.get(ACCOUNT_KEY):
        return AzureAccess(account, endpoint, "account-key", account_key=env[ACCOUNT_KEY])
    if env.get(SAS_TOKEN):
        return AzureAccess(account, endpoint, "sas-token", sas_token=env[SAS_TOKEN].lstrip("?"))
    return AzureAccess(account, endpoint, "default-credential")


def s3_options(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for s3fs.S3FileSystem; credentials stay with botocore's own chain."""
    env = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    return options


def gcs_options() -> dict[str, Any]:
    """Keyword arguments for gcsfs.GCSFileSystem: Google's application default credentials."""
    return {"token": "google_default"}
