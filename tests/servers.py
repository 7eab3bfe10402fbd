"""Real storage servers for the storage tests: Azurite (Azure Blob) and moto (S3) on 127.0.0.1, free ports.

Each starts once per test session from a fixture and is stopped by its pid in teardown. The tests that use
them get a fresh container or bucket and the environment variables a user would set.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fault_proxy import FaultProxy

if TYPE_CHECKING:
    from tests.mariadb import SqlAzurite  # imports this module: for the annotation only

ROOT = Path(__file__).resolve().parents[1]
AZURITE_DIR = ROOT / "tools" / "azurite" / "node_modules"
AZURITE_BIN = AZURITE_DIR / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f} s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def azurite_account_key() -> str:
    """Azurite's well-known development key, read from Azurite's own README (not from memory)."""
    readme = (AZURITE_DIR / "azurite" / "README.md").read_text(encoding="utf-8")
    match = re.search(r"Account key: `([A-Za-z0-9+/=]+)`", readme)
    if match is None:
        raise RuntimeError("Azurite's README no longer states the development account key")
    return match.group(1)


@dataclass(frozen=True)
class Azurite:
    """A running Azurite blob service."""

    port: int
    key: str
    pid: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={self.key};BlobEndpoint={self.endpoint};"
        )

    def service(self):  # type: ignore[no-untyped-def]
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def new_container(self) -> str:
        name = f"t{uuid.uuid4().hex[:12]}"
        self.service().create_container(name)
        return name

    def uri(self, container: str, path: str = "") -> str:
        """The wasbs:// URI a Spark user would write for this container."""
        base = f"wasbs://{container}@{ACCOUNT}.blob.core.windows.net"
        return f"{base}/{path}" if path else base

    def list_requests(self) -> int:
        """List Blobs requests Azurite has answered so far (from its debug log, once the log stops growing).

        Azurite writes the log asynchronously: a count taken right after the last request can miss it.
        """
        log = Path(os.environ["TIDEMARK_AZURITE_DEBUG_LOG"])
        deadline = time.monotonic() + 10
        size = -1
        while size != log.stat().st_size and time.monotonic() < deadline:
            size = log.stat().st_size
            time.sleep(0.3)
        text = log.read_text(encoding="utf-8", errors="replace")
        return len(re.findall(r"RequestURL=\S*comp=list", text))


def start_azurite_process(
    port: int, log: Path, *args: str, env: dict[str, str] | None = None, what: str = "azurite-blob"
) -> subprocess.Popen[bytes]:
    """Azurite's blob service on 127.0.0.1:port, no telemetry, with `args` added (the store it keeps its metadata
    in); listening when this returns, stopped again when it does not come up."""
    if not AZURITE_BIN.exists():
        raise RuntimeError("Azurite is not installed: run `make azurite` (npm ci in tools/azurite)")
    command = [
        str(AZURITE_BIN),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--disableTelemetry",
        # The azure-storage-blob SDK may speak a newer REST version than this Azurite knows.
        "--skipApiVersionCheck",
        *args,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_for_port(port, process, what, log)
    except BaseException:
        _stop(process)
        raise
    return process


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's blob service on a free loopback port, in memory, no telemetry."""
    folder = tmp_path_factory.mktemp("azurite")
    port = free_port()
    debug = folder / "debug.log"
    os.environ["TIDEMARK_AZURITE_DEBUG_LOG"] = str(debug)
    process = start_azurite_process(port, folder / "azurite.log", "--inMemoryPersistence", "--debug", str(debug))
    try:
        yield Azurite(port, azurite_account_key(), process.pid)
    finally:
        _stop(process)


@dataclass(frozen=True)
class MotoS3:
    """A running moto S3 server."""

    port: int
    pid: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",  # moto accepts any key
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def new_bucket(self) -> str:
        import boto3

        name = f"t{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """moto's S3 server on a free loopback port."""
    folder = tmp_path_factory.mktemp("moto")
    port = free_port()
    log = folder / "moto.log"
    server = Path(sys.executable).parent / "moto_server"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(server), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_port(port, process, "moto_server", log)
        yield MotoS3(port, process.pid)
    finally:
        _stop(process)


@pytest.fixture
def azure_env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:
    """The environment a user of the emulator sets: its connection string."""
    for name in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    return azurite


@pytest.fixture
def s3_env(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> MotoS3:
    """The standard AWS variables pointing at moto."""
    for name, value in moto_s3.env().items():
        monkeypatch.setenv(name, value)
    return moto_s3


# --- Spark itself on the emulators (issue 27) -----------------------------------------------------------------

# hadoop-azure's emulator mode always connects to the Azure Storage SDK's development account at this port.
WASB_EMULATOR_PORT = 10000


@dataclass(frozen=True)
class SparkStore:
    """A storage server as Spark and tidemark reach it: through a fault/latency proxy."""

    kind: str  # "wasb", "abfs" or "s3a"
    proxy: FaultProxy
    server_pid: int
    env: dict[str, str]
    new_root: Callable[[], str]  # a fresh container or bucket: the URI of an empty folder in it

    def calm(self) -> None:
        """No latency, no errors, no hooks, counts reset."""
        self.proxy.latency = 0.0
        self.proxy.error_rate = 0.0
        self.proxy.clear_hooks()
        self.proxy.reset_counts()
        self.proxy._down_until = 0.0


@pytest.fixture(scope="session")
def wasb_proxy(azurite: Azurite) -> Iterator[FaultProxy]:
    """The fault proxy on 127.0.0.1:10000, where hadoop-azure's emulator mode looks; Azurite behind it."""
    proxy = FaultProxy(WASB_EMULATOR_PORT, azurite.port, error_body="azure")
    try:
        proxy.start()
    except OSError as exc:
        raise RuntimeError(
            f"cannot listen on 127.0.0.1:{WASB_EMULATOR_PORT} ({exc}): hadoop-azure's WASB emulator mode reaches "
            "Azurite only there; stop whatever holds the port (another Azurite?) and rerun"
        ) from exc
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def s3_proxy(moto_s3: MotoS3) -> Iterator[FaultProxy]:
    """A fault proxy on a free port in front of moto."""
    proxy = FaultProxy(0, moto_s3.port, error_body="s3").start()
    yield proxy
    proxy.stop()


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# Module-scoped, so one module's tests can share what one run of Spark wrote (each run costs a minute).
@pytest.fixture(scope="module")
def wasb_store(azurite: Azurite, wasb_proxy: FaultProxy) -> Iterator[SparkStore]:
    """wasbs:// on Azurite for Spark (emulator mode) and tidemark, both through the proxy on port 10000."""
    endpoint = f"http://127.0.0.1:{WASB_EMULATOR_PORT}/{ACCOUNT}"
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={azurite.key};BlobEndpoint={endpoint};"
    )
    env = {"AZURE_STORAGE_CONNECTION_STRING": connection}
    store = SparkStore("wasb", wasb_proxy, azurite.pid, env, lambda: azurite.uri(azurite.new_container(), "job"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use_env(monkeypatch, env)
        store.calm()
        yield store
        store.calm()


@pytest.fixture(scope="module")
def abfs_store(sql_azurite: SqlAzurite) -> Iterator[SparkStore]:
    """abfs:// on Azurite: ABFS over the Blob endpoint (Hadoop 3.4.2+), straight to Azurite's free port. This Azurite
    keeps its metadata in MariaDB (tests/mariadb.py: the store whose cost does not grow with the container)."""
    azurite = sql_azurite.azurite
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string}

    def new_root() -> str:
        return f"abfs://{azurite.new_container()}@{ACCOUNT}.dfs.core.windows.net/job"

    proxy = FaultProxy(0, azurite.port)  # never started: abfs goes to Azurite directly
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use_env(monkeypatch, env)
        yield SparkStore("abfs", proxy, azurite.pid, env, new_root)


@pytest.fixture(scope="module")
def s3a_store(moto_s3: MotoS3, s3_proxy: FaultProxy) -> Iterator[SparkStore]:
    """s3a:// on moto for Spark and tidemark, both through the proxy."""
    env = {**moto_s3.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_proxy.port}"}
    store = SparkStore("s3a", s3_proxy, moto_s3.pid, env, lambda: f"s3a://{moto_s3.new_bucket()}/job")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _use_env(monkeypatch, env)
        store.calm()
        yield store
        store.calm()
