"""Storage URIs, credentials from the environment and folder listings rebuilt from flat listings (no server)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tidemark.errors import StorageError
from tidemark.storage.base import FileEntry, folders_from_flat, join
from tidemark.storage.credentials import azure_access, s3_options
from tidemark.storage.local import LocalFS
from tidemark.storage.uri import StoreKind, parse_location


@pytest.mark.parametrize(
    ("uri", "kind", "bucket", "key", "account"),
    [
        ("abfss://data@acct.dfs.core.windows.net/jobs/ck", StoreKind.AZURE, "data", "jobs/ck", "acct"),
        ("wasbs://data@acct.blob.core.windows.net/ck/", StoreKind.AZURE, "data", "ck", "acct"),
        ("az://data/ck", StoreKind.AZURE, "data", "ck", None),
        ("s3a://bucket/a/b", StoreKind.S3, "bucket", "a/b", None),
        ("s3://bucket", StoreKind.S3, "bucket", "", None),
        ("gs://bucket/p", StoreKind.GCS, "bucket", "p", None),
        ("hdfs://nn:8020/user/ck", StoreKind.HDFS, "nn:8020", "user/ck", None),
    ],
)
def test_cloud_uris_name_their_container_and_key(uri: str, kind: StoreKind, bucket: str, key: str, account: str | None):
    location = parse_location(uri)
    assert (location.kind, location.bucket, location.key, location.account) == (kind, bucket, key, account)
    assert location.uri == uri.rstrip("/")  # Spark gets the URI unchanged
    child = location.join("offsets/3")
    assert child.uri == f"{uri.rstrip('/')}/offsets/3"
    assert child.relative_to(location) == "offsets/3"
    assert child.parent.parent == location


def test_local_paths_and_file_uris_are_absolute_os_paths(tmp_path: Path):
    assert parse_location(str(tmp_path)).key == str(tmp_path)
    file_uri = parse_location(f"file://{tmp_path}")
    assert file_uri.is_local and file_uri.key == str(tmp_path) and file_uri.uri == f"file://{tmp_path}"
    assert parse_location("relative/p").key == os.path.abspath("relative/p")
    assert file_uri.join("a/b").key == str(tmp_path / "a" / "b")


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("ftp://host/p", "unsupported storage scheme 'ftp'"),
        ("abfss://acct.dfs.core.windows.net/p", "not an Azure storage URI"),
        ("s3a://AKIA:secret@bucket/p", "must not carry keys"),
        ("wasbs://c@a.blob.core.windows.net/p?sig=abc", "must not carry keys"),
        ("s3a:///p", "names no container"),
    ],
)
def test_bad_uris_are_one_line_usage_errors(uri: str, fragment: str):
    with pytest.raises(StorageError, match=fragment) as caught:
        parse_location(uri)
    assert "\n" not in str(caught.value)
    assert "secret" not in str(caught.value) and "sig=abc" not in str(caught.value)


def test_a_relative_path_cannot_leave_its_root():
    with pytest.raises(StorageError):
        parse_location("s3a://b/ck").join("../other")


def test_azure_connection_string_endpoint_wins_and_secrets_stay_out_of_repr():
    location = parse_location("abfss://data@dev.dfs.core.windows.net/ck")
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": (
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=SECRETKEY==;BlobEndpoint=http://127.0.0.1:1/dev;"
        )
    }
    access = azure_access(location, env)
    assert access.blob_endpoint == "http://127.0.0.1:1/dev" and access.method == "connection-string"
    assert "SECRETKEY" not in repr(access)


def test_azure_credentials_for_another_account_are_refused():
    location = parse_location("abfss://data@prod.dfs.core.windows.net/ck")
    env = {"AZURE_STORAGE_CONNECTION_STRING": "AccountName=dev;AccountKey=K;BlobEndpoint=http://127.0.0.1:1/dev"}
    with pytest.raises(StorageError, match=r"account 'dev' but .* names account 'prod'"):
        azure_access(location, env)


def test_azure_account_key_and_default_credential_order():
    location = parse_location("wasbs://data@prod.blob.core.windows.net/ck")
    keyed = azure_access(location, {"AZURE_STORAGE_ACCOUNT_KEY": "K", "AZURE_STORAGE_SAS_TOKEN": "?sv=1"})
    assert keyed.method == "account-key" and keyed.blob_endpoint == "https://prod.blob.core.windows.net"
    assert azure_access(location, {"AZURE_STORAGE_SAS_TOKEN": "?sv=1"}).sas_token == "sv=1"
    assert azure_access(location, {}).method == "default-credential"


def test_s3_endpoint_comes_from_the_standard_variables():
    assert s3_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}) == {"endpoint_url": "http://127.0.0.1:9"}
    assert s3_options({"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://b"})["endpoint_url"] == "http://b"
    assert s3_options({}) == {}


def _tree(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    folders = ["offsets", "commits", "state/0/0", "state/0/1", "state/0/1/SSTs", "state/0/10", "state/1/0/left"]
    for folder in folders:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(rng.randint(1, 6)):
            (root / folder / f"{i}.delta").write_bytes(b"x" * rng.randint(0, 50))
    (root / "metadata").write_text("{}")
    (root / "_tidemark").mkdir()
    (root / "_tidemark" / "run.lock").write_text("{}")


def _normalise(listings):  # type: ignore[no-untyped-def]
    return sorted((d.rel, sorted(d.files), sorted(d.dirs)) for d in listings)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_folders_rebuilt_from_a_flat_listing_equal_a_folder_walk(tmp_path: Path, seed: int):
    _tree(tmp_path, seed)
    local = LocalFS(str(tmp_path))
    entries = []
    for listing in local.walk():
        entries.extend(FileEntry(join(listing.rel, name), size) for name, size in listing.files)
    entries.sort(key=lambda e: e.rel)  # the order object stores list names in
    exclude = frozenset({"_tidemark"})
    walked = [d for d in local.walk("", exclude) if d.rel != ""]
    rebuilt = [d for d in folders_from_flat(iter(entries), "", exclude) if d.rel != ""]
    # The root's own dirs differ only by the excluded folder, which a flat listing never reports.
    assert _normalise(rebuilt) == _normalise(walked)
    state_only = list(folders_from_flat(iter(entries), "state", frozenset()))
    assert _normalise(state_only) == _normalise(local.walk("state"))
