"""Helpers for the tests where Spark itself writes a checkpoint and sink on a storage server (issue 27)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from tests.helpers import read_sink, write_config
from tests.oracles import window_oracle
from tidemark.pipeline.generate import GenerateResult, generate_events
from tidemark.storage import open_storage

# hadoop-azure's WASB retries every failed request up to 30 times, backing off 3 s to 90 s: right for a real
# account, minutes per fault test here. The fault tests keep the retries and shorten the waits.
FAST_WASB_RETRIES = {
    "spark.hadoop.fs.azure.io.retry.min.backoff.interval": "50",
    "spark.hadoop.fs.azure.io.retry.backoff.interval": "100",
    "spark.hadoop.fs.azure.io.retry.max.backoff.interval": "2000",
}
WINDOW = timedelta(minutes=15)
WATERMARK = timedelta(minutes=10)


def download_sink(uri: str, into: Path) -> list[str]:
    """Every Parquet part file under the sink folder (the raw files, not through _spark_metadata), copied locally."""
    store = open_storage(uri)
    names = [e.rel for e in store.list_files() if e.rel.endswith(".parquet") and not e.rel.startswith("_")]
    for rel in names:
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        store.download(rel, str(target))
    return names


def raw_sink(uri: str, into: Path) -> pd.DataFrame:
    """The sink's rows as a plain Parquet reader sees every part file on the server."""
    names = download_sink(uri, into)
    assert names, f"no Parquet files under {uri}"
    return read_sink(into)


def events(tmp_path: Path, files: int = 4, seed: int = 27) -> GenerateResult:
    """A small landing folder: one batch per file (max_files_per_trigger = 1)."""
    return generate_events(tmp_path / "landing", events=400, keys=4, files=files, seed=seed)


def oracle(data: GenerateResult) -> pd.DataFrame:
    return window_oracle([[f] for f in data.files], window=WINDOW, watermark=WATERMARK)


def cloud_config(tmp_path: Path, root: str, **overrides: dict[str, Any]) -> Path:
    """A pipeline whose checkpoint, sink, quarantine and monitor folder are all under root on the server."""
    tables: dict[str, dict[str, Any]] = {
        "source": {"path": str(tmp_path / "landing")},
        "sink": {"path": f"{root}/output"},
        "checkpoint": {"location": f"{root}/checkpoint"},
        "quarantine": {"path": f"{root}/quarantine"},
        "monitor": {"dir": f"{root}/monitor"},
    }
    for table, keys in overrides.items():
        tables.setdefault(table, {}).update(keys)
    folder = tmp_path / "config"
    folder.mkdir(exist_ok=True)
    return write_config(folder, **tables)


def delete_tree(uri: str) -> None:
    """Every object below uri deleted, Hadoop's folder markers too (WASB/ABFS `hdi_isfolder` blobs, s3a's `dir/`
    keys), as deleting the folder with the service's own tools does (tidemark's listings skip markers)."""
    import os
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    prefix = parts.path.strip("/")
    if parts.scheme in ("wasb", "wasbs", "abfs", "abfss"):
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
        container = service.get_container_client(parts.netloc.split("@")[0])
        names = [b.name for b in container.list_blobs(name_starts_with=f"{prefix}/")] + [prefix]
        for start in range(0, len(names), 256):  # a Blob Batch takes 256
            container.delete_blobs(*names[start : start + 256], raise_on_any_failure=False)
        return
    import boto3

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    listed = client.list_objects_v2(Bucket=parts.netloc, Prefix=f"{prefix}/")
    keys = [{"Key": o["Key"]} for o in listed.get("Contents", [])] + [{"Key": f"{prefix}/"}]
    client.delete_objects(Bucket=parts.netloc, Delete={"Objects": keys})
