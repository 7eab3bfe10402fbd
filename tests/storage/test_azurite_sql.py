"""Issue 39: Azurite on its SQL metadata store, backed by a MariaDB the tests start themselves.

The ABFS tests (the smoke feature abfs, tests/storage/test_repartition_cloud.py) run Spark and tidemark on such an
Azurite for the session; this one proves a server of its own starts from an empty data folder, keeps the metadata in
MariaDB and the bytes on disk, serves the Azure SDK tidemark uses, and stops cleanly by its pids (nothing left
listening, MariaDB's clean shutdown logged).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.helpers import wait_gone
from tests.mariadb import start_sql_azurite
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_sql_azurite_starts_serves_and_stops_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_sql_azurite(tmp_path)
    try:
        azurite = server.azurite
        container = azurite.new_container()
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
        store = open_storage(azurite.uri(container, "job"))
        store.write_atomic("a/one", b"1")  # tidemark's atomic write: a temporary blob, then a rename
        store.write_atomic("a/two", b"22")
        assert sorted(e.rel for e in store.list_files()) == ["a/one", "a/two"]
        assert store.read_bytes("a/two") == b"22"
        # The metadata is in MariaDB (one row per blob, the temporaries gone), the bytes under --location, and
        # no LokiJS database file was written.
        assert server.blob_rows() == 2
        # Block ids as long as Azure takes (64 bytes, 88 in base64): Hadoop's ABFS names its blocks with 80
        # characters, which Azurite's own Blocks table (VARCHAR(64)) refused with 500 (tests/mariadb.py).
        blob = azurite.service().get_blob_client(container, "job/b/blocks")
        block = "0_508304639".ljust(64, "A")
        blob.stage_block(block, b"abc")
        blob.commit_block_list([block])
        assert store.read_bytes("b/blocks") == b"abc"
        assert not list(server.location.glob("__azurite_db_*"))
        assert any(p.is_file() for p in server.location.rglob("*"))
    finally:
        server.stop()
    assert wait_gone(server.process.pid) and wait_gone(server.mariadb.pid)
    assert not _listening(azurite.port) and not _listening(server.mariadb.port)
    assert not server.mariadb.socket.exists()
    assert "Shutdown complete" in (tmp_path / "mariadb" / "mariadb.log").read_text()
