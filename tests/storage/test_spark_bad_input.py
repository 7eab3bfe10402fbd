"""Issue 27, bad input for a pipeline on cloud storage: one line, exit 1, no trace, no secret, and no JVM started.

A wrong key (Azure answers 403) names the account and the variable it came from; a missing container or bucket
says so; a cloud URI without credentials names what to set. tidemark's own I/O meets each of these before Spark
starts (the checkpoint is checked first), so the answer costs no JVM start.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.helpers import write_config
from tests.servers import ACCOUNT, Azurite, MotoS3
from tidemark.cli.main import main

WRONG_KEY = base64.b64encode(b"not the key of this account, 64 bytes long, padded to that....").decode()


def _run(tmp_path: Path, root: str, capsys: pytest.CaptureFixture[str]) -> str:
    (tmp_path / "landing").mkdir(exist_ok=True)
    config = write_config(
        tmp_path,
        source={"path": str(tmp_path / "landing")},
        sink={"path": f"{root}/output"},
        checkpoint={"location": f"{root}/checkpoint"},
    )
    code = main(["run", str(config), "--available-now"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("tidemark running")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_wrong_key_names_the_account_and_the_variable(
    azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    container = azurite.new_container()
    for name in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string.replace(azurite.key, WRONG_KEY))
    # abfs:// reaches Azurite on its own port (ABFS over the Blob endpoint), and signs with the key
    line = _run(tmp_path, f"abfs://{container}@{ACCOUNT}.dfs.core.windows.net/job", capsys)
    assert f"storage account '{ACCOUNT}'" in line and "AZURE_STORAGE_CONNECTION_STRING" in line and "403" in line
    assert WRONG_KEY not in line and azurite.key not in line


def test_a_missing_container_or_bucket_is_one_line(
    azure_env: Azurite, s3_env: MotoS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _run(tmp_path, f"abfs://nosuchcontainer@{ACCOUNT}.dfs.core.windows.net/job", capsys)
    assert f"container 'nosuchcontainer' does not exist in storage account '{ACCOUNT}'" in line
    line = _run(tmp_path, "s3a://nosuchbucket/job", capsys)
    assert "bucket 'nosuchbucket' does not exist" in line


def test_a_cloud_uri_without_credentials_names_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("AZURE_"):
            monkeypatch.delenv(name)
    line = _run(tmp_path, "wasbs://data@nosuchaccount.blob.core.windows.net/job", capsys)
    assert "no Azure credentials found for account 'nosuchaccount'" in line
    assert "AZURE_STORAGE_CONNECTION_STRING" in line and "AZURE_STORAGE_ACCOUNT_KEY" in line
