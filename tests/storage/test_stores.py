"""Every store kind behaves the same through the storage layer, proven on real servers (Azurite, moto)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.servers import ACCOUNT, Azurite, MotoS3
from tidemark.errors import StorageError
from tidemark.storage import open_storage, parse_location
from tidemark.storage.base import walk_folders

FILES = {
    "offsets/0": b"v1\n{}",
    "offsets/1": b"v1\n{}\n",
    "commits/0": b"v1",
    "state/0/0/1.delta": b"abc",
    "state/0/1/1.delta": b"abcd",
    "state/0/1/SSTs/000-x.sst": b"s" * 100,
    "state/0/10/2.snapshot": b"",
    "metadata": b'{"id":"q"}',
}


def _fill(root: str) -> None:
    store = open_storage(root)
    for rel, data in FILES.items():
        assert store.write_atomic(rel, data)


def test_write_read_list_and_delete(store_root: str):
    _fill(store_root)
    store = open_storage(store_root)
    assert store.read_bytes("state/0/1/1.delta") == b"abcd"
    assert store.read_bytes("state/0/1/missing") is None
    with store.open_read("offsets/1") as handle:
        assert handle.read() == b"v1\n{}\n"
    listed = {e.rel: e.size for e in store.list_files()}
    assert listed == {rel: len(data) for rel, data in FILES.items()}
    assert {e.rel for e in store.list_files("state/0/1")} == {"state/0/1/1.delta", "state/0/1/SSTs/000-x.sst"}
    top = store.list_dir("")
    assert top is not None and sorted(top.dirs) == ["commits", "offsets", "state"] and top.files == [("metadata", 10)]
    assert store.list_dir("nothing-here") is None
    assert store.exists("state/0") and store.exists("metadata") and not store.exists("state/9")
    entry = store.stat("state/0/1/SSTs/000-x.sst")
    assert entry is not None and entry.size == 100 and entry.mtime is not None
    store.delete("commits/0")
    store.delete("commits/0")  # a missing file is not an error
    assert store.read_bytes("commits/0") is None


def test_walk_gives_every_folder_once_with_all_its_files(store_root: str):
    _fill(store_root)
    store = open_storage(store_root)
    walked = {d.rel: (sorted(d.files), sorted(d.dirs)) for d in store.walk("", exclude=frozenset({"offsets"}))}
    assert "offsets" not in walked
    assert walked["state/0/1"] == ([("1.delta", 4)], ["SSTs"])
    assert walked["state/0/10"] == ([("2.snapshot", 0)], [])
    per_folder = {d.rel: sorted(d.files) for d in walk_folders(store.list_dir, "state", frozenset())}
    assert {rel: files for rel, (files, _) in walked.items() if rel.startswith("state")} == per_folder


def test_exclusive_create_refuses_an_existing_file(store_root: str):
    store = open_storage(store_root)
    assert store.write_atomic("_tidemark/run.lock", b"first", exclusive=True)
    assert not store.write_atomic("_tidemark/run.lock", b"second", exclusive=True)
    assert store.read_bytes("_tidemark/run.lock") == b"first"
    assert store.write_atomic("_tidemark/run.lock", b"third")
    assert store.read_bytes("_tidemark/run.lock") == b"third"


def test_rename_and_download(store_root: str, tmp_path: Path):
    _fill(store_root)
    store = open_storage(store_root)
    store.rename("offsets/1", "archive/offsets/1")
    assert store.read_bytes("offsets/1") is None
    assert store.read_bytes("archive/offsets/1") == b"v1\n{}\n"
    assert store.download("state/0/1/SSTs/000-x.sst", str(tmp_path / "dl" / "x.sst")) == 100
    assert (tmp_path / "dl" / "x.sst").read_bytes() == b"s" * 100


def test_parquet_through_arrow(store_root: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = open_storage(store_root)
    filesystem, base = store.arrow()
    filesystem.create_dir(f"{base}/out", recursive=True)
    pq.write_table(pa.table({"k": ["a", "b"]}), f"{base}/out/part-0.parquet", filesystem=filesystem)
    assert pq.read_table(f"{base}/out/part-0.parquet", filesystem=filesystem).column("k").to_pylist() == ["a", "b"]


def test_a_flat_listing_costs_one_request_per_page(azure_env: Azurite, monkeypatch: pytest.MonkeyPatch):
    """N blobs under a prefix: ceil(N / page size) List Blobs requests, however many folders they sit in."""
    import tidemark.storage.azure as azure_module

    monkeypatch.setattr(azure_module, "PAGE_SIZE", 100)
    container = azure_env.new_container()
    root = azure_env.uri(container, "ck")
    store = open_storage(root)
    names = [f"state/0/{p}/{v}.delta" for p in range(30) for v in range(15)]  # 450 blobs in 30 folders
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: store.write_atomic(n, b"x"), names))
    before_server = azure_env.list_requests()
    store.list_requests = 0
    listed = list(store.list_files())
    assert len(listed) == 450
    assert store.list_requests == math.ceil(450 / 100)
    assert azure_env.list_requests() - before_server == math.ceil(450 / 100)  # counted by Azurite itself
    before_server = azure_env.list_requests()
    store.list_requests = 0
    folders = list(walk_folders(store.list_dir, "", frozenset()))  # what a per-folder FileSystem walk costs
    assert len(folders) == 33
    assert store.list_requests == azure_env.list_requests() - before_server >= 33


def test_missing_container_or_bucket_is_one_line(azure_env: Azurite, s3_env: MotoS3):
    for uri, fragment in (
        (azure_env.uri("nosuchcontainer", "ck"), "container 'nosuchcontainer' does not exist"),
        ("s3a://nosuchbucket/ck", "bucket 'nosuchbucket' does not exist"),
    ):
        with pytest.raises(StorageError, match=fragment) as caught:
            open_storage(uri)
        assert "\n" not in str(caught.value)


def test_missing_aws_credentials_name_the_variables(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_s3.endpoint)
    with pytest.raises(StorageError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_storage("s3a://anybucket-creds/ck")


def test_missing_azure_credentials_name_the_variables(monkeypatch: pytest.MonkeyPatch):
    for name in list(__import__("os").environ):
        if name.startswith("AZURE_"):
            monkeypatch.delenv(name)
    with pytest.raises(StorageError, match="AZURE_STORAGE_CONNECTION_STRING") as caught:
        open_storage("abfss://data@nosuchaccount.dfs.core.windows.net/ck")
    assert "\n" not in str(caught.value)


def test_local_store_refuses_paths_outside_its_root(tmp_path: Path):
    store = open_storage(str(tmp_path / "root"))
    with pytest.raises(StorageError):
        store.read_bytes("../../etc/passwd")
    assert parse_location(str(tmp_path)).is_local


def test_bad_locations_on_the_command_line_are_one_line_and_exit_1(
    azure_env: Azurite, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    from tidemark.cli.main import main

    cases = [
        ("ftp://host/ck", "abfss"),  # an unknown scheme names the supported ones
        (azure_env.uri("nosuchcontainer", "ck"), "does not exist"),
    ]
    for uri, fragment in cases:
        for argv in (["checkpoint", "inspect", uri], ["checkpoint", "prune", uri, "--keep", "1"], ["analyze", uri]):
            code = main(argv)
            captured = capsys.readouterr()
            lines = [line for line in captured.err.splitlines() if line.strip()]
            assert code == 1, (argv, captured.err)
            assert len(lines) == 1 and fragment in lines[0], (argv, captured.err)
            assert "Traceback" not in captured.err
    for name in list(__import__("os").environ):
        if name.startswith("AZURE_"):
            monkeypatch.delenv(name)
    assert main(["checkpoint", "inspect", "abfss://data@nosuchaccount.dfs.core.windows.net/ck"]) == 1
    err = capsys.readouterr().err
    assert "AZURE_STORAGE_CONNECTION_STRING" in err and len(err.strip().splitlines()) == 1


AWKWARD_NAMES = [
    "state/0/0/1.delta",
    "state/0/0/with space.delta",
    "state/0/0/plus+and%percent.delta",
    "state/0/0/ünïcode-é.delta",
    "state/0/0/amp&semi;lt<gt>.delta",
    "state/0/1/SSTs/000-a.sst",
    "offsets/0",
    "metadata",
]


def _no_fallback(prefix: str, delimiter: bool, marker: str) -> Iterator[tuple[list[Any], list[str]]]:
    raise AssertionError(f"the XML listing fell back to the SDK at marker {marker!r}")
    yield [], []


@pytest.mark.parametrize("root", ["ck", "my ck+a&b=c"])
def test_the_xml_listing_gives_what_the_sdk_models_give(azure_env: Azurite, monkeypatch: pytest.MonkeyPatch, root: str):
    """The page parser (names, sizes, times, etags, folders) against the SDK's own listing of the same blobs.

    The second root has characters a query string gives meaning to: the prefix must reach the service whole.
    """
    import tidemark.storage.azure as azure_module

    monkeypatch.setattr(azure_module, "PAGE_SIZE", 3)  # several pages: the marker is carried over
    container = azure_env.new_container()
    store = open_storage(azure_env.uri(container, root))
    for i, rel in enumerate(AWKWARD_NAMES):
        assert store.write_atomic(rel, b"x" * (i + 1))
    # An ADLS Gen2 folder marker: an empty blob with hdi_isfolder=true, which neither listing reports.
    azure_env.service().get_container_client(container).upload_blob(
        f"{root}/state/0/2", b"", metadata={"hdi_isfolder": "true"}
    )
    backend = store._backend  # type: ignore[attr-defined]
    for prefix, delimiter in ((f"{root}/", False), (f"{root}/state/0/", True), (f"{root}/state/0/0/", True)):
        store.list_requests = 0
        slow = list(backend._sdk_pages(prefix, delimiter, ""))
        with monkeypatch.context() as patched:  # every page must come from the XML path, none from the fallback
            patched.setattr(backend, "_sdk_pages", _no_fallback)
            fast = list(backend.list_pages(prefix, delimiter))
        assert [len(f) + len(p) for f, p in fast] == [len(f) + len(p) for f, p in slow]  # same pages
        fast_files = sorted((e for files, _ in fast for e in files), key=lambda e: e.rel)
        assert fast_files == sorted((e for files, _ in slow for e in files), key=lambda e: e.rel)
        assert sorted(p for _, prefixes in fast for p in prefixes) == sorted(p for _, ps in slow for p in ps)
    listed = {e.rel: e.size for e in store.list_files()}
    assert listed == {rel: i + 1 for i, rel in enumerate(AWKWARD_NAMES)}


def test_a_folder_of_only_markers_does_not_exist(azure_env: Azurite) -> None:
    """#39, found by the abfs smoke test: Hadoop's ABFS leaves an `hdi_isfolder` blob per folder it made; a
    checkpoint whose files were all deleted is gone for tidemark (recover then starts it anew), markers or not."""
    container = azure_env.new_container()
    client = azure_env.service().get_container_client(container)
    for folder in ("job/checkpoint", "job/checkpoint/commits", "job/checkpoint/state/0/1"):
        client.upload_blob(folder, b"", metadata={"hdi_isfolder": "true"})
    client.upload_blob("job/checkpoint-other/x", b"1")  # a sibling whose name starts alike is not below it
    store = open_storage(azure_env.uri(container, "job"))
    assert not store.exists("checkpoint") and not store.exists("checkpoint/state")
    client.upload_blob("job/checkpoint/state/0/1/1.delta", b"1")
    assert store.exists("checkpoint") and store.exists("checkpoint/state") and not store.exists("checkpoint/commits")


def test_the_sdk_listing_serves_when_no_raw_sender(azure_env: Azurite, monkeypatch: pytest.MonkeyPatch):
    """Another SDK version without the pipeline's sender: the same listing through the SDK's models."""
    import tidemark.storage.azure as azure_module

    container = azure_env.new_container()
    store = open_storage(azure_env.uri(container, "ck"))
    for rel, data in FILES.items():
        assert store.write_atomic(rel, data)
    with_raw = sorted(store.list_files(), key=lambda e: e.rel)
    monkeypatch.setattr(azure_module, "raw_sender", lambda container: None)
    assert sorted(open_storage(azure_env.uri(container, "ck")).list_files(), key=lambda e: e.rel) == with_raw
    assert {e.rel: e.size for e in with_raw} == {rel: len(data) for rel, data in FILES.items()}


def test_a_sas_connection_string_lists_through_the_same_signed_pages(
    azure_env: Azurite, monkeypatch: pytest.MonkeyPatch
):
    """A SAS token travels in the URL's query: the listing's own query must join it, not replace it."""
    from datetime import datetime, timedelta

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    from tidemark.compat import UTC

    container = azure_env.new_container()
    sas = generate_account_sas(
        ACCOUNT,
        azure_env.key,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, list=True, delete=True, create=True, add=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"BlobEndpoint={azure_env.endpoint};SharedAccessSignature={sas}"
    )
    store = open_storage(azure_env.uri(container, "ck"))
    for rel, data in FILES.items():
        assert store.write_atomic(rel, data)
    store.list_requests = 0
    assert {e.rel: e.size for e in store.list_files()} == {rel: len(data) for rel, data in FILES.items()}
    assert store.list_requests == 1
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"BlobEndpoint={azure_env.endpoint};SharedAccessSignature=sv=x"
    )
    with pytest.raises(StorageError, match=r"refused the credentials|answered"):
        list(open_storage(azure_env.uri(container, "ck")).list_files())


def test_deleting_many_files_reports_what_was_not_a_file(store_root: str):
    _fill(store_root)
    store = open_storage(store_root)
    gone = ["commits/0", "state/0/0/1.delta", "state/0/1/1.delta"]
    missing = store.delete_files([*gone, "nothing/here", "state/0/1"])  # the last is a folder
    assert sorted(missing) == ["nothing/here", "state/0/1"]
    assert {e.rel for e in store.list_files()} == set(FILES) - set(gone)


def test_a_journal_of_deletes_on_azure_sends_256_a_request_several_at_once(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
):
    from tests.fault_proxy import FaultProxy
    from tidemark.storage.journal import Step, journaled

    proxy = FaultProxy(0, azurite.port).start()
    try:
        endpoint = f"http://127.0.0.1:{proxy.port}/{ACCOUNT}"
        monkeypatch.setenv(
            "AZURE_STORAGE_CONNECTION_STRING",
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={azurite.key};BlobEndpoint={endpoint};",
        )
        root = azurite.uri(azurite.new_container(), "ck")
        store = open_storage(root)
        names = [f"state/0/{i % 7}/{i}.delta" for i in range(600)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda rel: store.write_atomic(rel, b"d"), names))
        store.write_atomic("state/0/keep", b"k")
        proxy.keep_log = True
        proxy.reset_counts()
        # Each batch request is held a moment at the proxy: the batches are sent at once, so they overlap there.
        flight = {"now": 0, "most": 0}
        guard = threading.Lock()

        def hold(request: Any) -> bool:
            with guard:
                flight["now"] += 1
                flight["most"] = max(flight["most"], flight["now"])
            time.sleep(0.5)
            with guard:
                flight["now"] -= 1
            return False

        proxy.on("POST", r".", hold)  # only Blob Batch requests are POSTs here
        steps = [Step(("checkpoint", rel)) for rel in [*names, "state/0/missing"]]
        result = journaled(parse_location(root).join("_tidemark/journal"), {"checkpoint": root}, steps, "prune")
        batches = [target for method, target in proxy.log if method == "POST" and "comp=batch" in target]
        assert len(batches) == math.ceil(601 / 256)
        assert flight["most"] == len(batches)  # all three in flight together (BATCH_THREADS at once)
        # No blob is deleted one by one: the only DELETE is the journal's own, once done (sent again only when
        # the SDK retried it on a slow answer, as on a loaded box).
        deletes = {urlsplit(target).path for method, target in proxy.log if method == "DELETE"}
        assert len(deletes) == 1 and "_tidemark/journal" in deletes.pop()
        assert result is not None and (result.deleted_files, result.already_done) == (600, 1)
        assert [e.rel for e in store.list_files()] == ["state/0/keep"]
    finally:
        proxy.stop()


@pytest.mark.parametrize("kind", ["azure", "s3"])
def test_a_journaled_folder_move_costs_one_copy_a_file_and_batched_deletes(
    kind: str, azurite: Azurite, moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder moves on an object store by one server-side copy a file, the target listed once (not a stat a file)
    and the sources deleted in batches (the swap of `state repartition` moves a checkpoint's every file: at 200,000
    files each request a file costs an hour on a slow store). Killed halfway, a rerun copies only what is missing."""
    from tests.fault_proxy import FaultProxy
    from tidemark.storage.journal import Step, journaled

    upstream = azurite.port if kind == "azure" else moto_s3.port
    proxy = FaultProxy(0, upstream, error_body=kind).start()
    try:
        if kind == "azure":
            endpoint = f"http://127.0.0.1:{proxy.port}/{ACCOUNT}"
            monkeypatch.setenv(
                "AZURE_STORAGE_CONNECTION_STRING",
                f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={azurite.key};BlobEndpoint={endpoint};",
            )
            root = azurite.uri(azurite.new_container(), "ck")
        else:
            for name, value in {**moto_s3.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}.items():
                monkeypatch.setenv(name, value)
            root = f"s3://{moto_s3.new_bucket()}/ck"
        store = open_storage(root)
        names = {f"state/0/{i % 7}/{i}.delta": f"d{i}".encode() for i in range(120)}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda item: store.write_atomic(*item), names.items()))
        # A killed run copied the first 40 (one of them short: a copy to redo) and deleted none.
        copied = sorted(names)[:40]
        for rel in copied:
            store.write_atomic(f"archive/{rel}", names[rel] if rel != copied[0] else b"")
        proxy.keep_log = True
        proxy.reset_counts()
        result = journaled(
            parse_location(root).join("_tidemark/journal"),
            {"checkpoint": root},
            [Step(("checkpoint", "state"), ("checkpoint", "archive/state"))],
            "repartition swap",
        )
        log = list(proxy.log)  # the move's requests (before the reads below)
        assert result is not None and result.moved_files == 120
        assert {e.rel: store.read_bytes(e.rel) for e in store.list_files()} == {
            f"archive/{rel}": data for rel, data in names.items()
        }
        # One PUT a copy (Azure's Copy Blob, S3's CopyObject), for the 80 missing and the short one only (a few
        # more when the SDK retried one on a slow answer, as on a loaded box).
        copies = [t for m, t in log if m == "PUT" and "_tidemark/journal" not in t]
        assert len(set(copies)) == 120 - 40 + 1 and len(copies) <= len(set(copies)) + 5, len(copies)
        # No stat, read or delete a file: the sources go in batches (Azure's Blob Batch, S3's DeleteObjects).
        batches = [t for m, t in log if m == "POST"]
        expected = 1  # Azure: 256 a batch; S3: 1,000
        assert expected <= len(batches) <= expected + 2, batches
        others = [(m, t) for m, t in log if m not in ("PUT", "POST") and "_tidemark/journal" not in t]
        assert len(others) <= 6, others  # the listings of source and target, the stat of the folder step
    finally:
        proxy.stop()
