"""A real Spark Connect server for the Connect tests: the server's main class through the pyspark wheel's own
spark-submit, in its own process on a free loopback port, stopped by its pid.

Its Python workers (foreachBatch functions) run this interpreter, so tidemark is importable there as it must be
on a cluster; its classpath has Delta Lake's and Spark's Kafka connector's jars from tidemark's own lock and Delta's
extension and catalog, as a Databricks cluster or a server started with `--packages` would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import _stop, _wait_for_port, free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass(frozen=True)
class ConnectServer:
    """A running Spark Connect server."""

    port: int
    pid: int
    log: Path

    @property
    def url(self) -> str:
        """The endpoint a client gives to SPARK_REMOTE."""
        return f"sc://127.0.0.1:{self.port}"


def _spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def start_connect_server(
    folder: Path, jars: list[Path], conf: dict[str, str]
) -> tuple[ConnectServer, subprocess.Popen[bytes]]:
    """Start the server; returns once it listens (or raises with the end of its log)."""
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        **conf,
    }
    command = [str(_spark_submit()), "--master", "local[2]", "--class", SERVER_CLASS]
    if jars:
        command += ["--jars", ",".join(str(j) for j in jars)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "connect-server.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("SPARK_REMOTE", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True
        )
    try:
        _wait_for_port(port, process, "the Spark Connect server", log, timeout=240)
    except BaseException:
        stop_connect_server(process)
        raise
    return ConnectServer(port=port, pid=process.pid, log=log), process


def stop_connect_server(process: subprocess.Popen[bytes]) -> None:
    """Stop the server's process group (the JVM and its Python workers) by its pid."""
    _stop(process)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One server per test module, with Delta Lake (on its classpath and in its catalog) and Spark's Kafka connector."""
    from tidemark.sinks.delta.sink import CATALOG, EXTENSION
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import fetch

    jars = list(fetch([JarFeature.DELTA, JarFeature.KAFKA]).paths)
    conf = {"spark.sql.extensions": EXTENSION, "spark.sql.catalog.spark_catalog": CATALOG}
    server, process = start_connect_server(tmp_path_factory.mktemp("connect"), jars, conf)
    try:
        yield server
    finally:
        stop_connect_server(process)


CLIENT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark-ci" / "connect-client"
ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ROOT / "tools" / "connect-client" / "overrides.txt"


@dataclass(frozen=True)
class ClientOnly:
    """A venv with pyspark-client (no JVM side of PySpark, no py4j) and tidemark's other dependencies, as
    docs/connect.md installs it; tidemark itself comes from this clone's src/ (PYTHONPATH)."""

    python: Path

    def env(self, **extra: str) -> dict[str, str]:
        """No java on PATH (only the venv's bin/), no JAVA_HOME, this clone's tidemark."""
        env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYTHONPATH")}
        return {**env, "PATH": str(self.python.parent), "PYTHONPATH": str(ROOT / "src"), **extra}


def _client_key() -> str:
    import hashlib

    from pyspark import __version__

    digest = hashlib.sha256(__version__.encode())
    for path in (ROOT / "pyproject.toml", ROOT / "uv.lock", OVERRIDES):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def client_only() -> ClientOnly:
    """The client-only venv, built once per dependency set in the CI cache (outside the clone): tidemark installed
    with the route docs/connect.md gives (its `connect` extra, pyspark-client of the installed line, the override
    that leaves the full pyspark out), then tidemark itself uninstalled so that this clone's src/ is what runs."""
    from pyspark import __version__

    folder = CLIENT_CACHE / _client_key()
    python = folder / "bin" / "python"
    if (folder / ".complete").exists():
        return ClientOnly(python)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    uv = ROOT / ".uv" / "bin" / "uv"
    packages = [f"pyspark-client=={__version__}", f"{ROOT}[connect]"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    steps = [
        [str(uv), "venv", "-q", str(folder), "--python", sys.executable],
        [str(uv), "pip", "install", "-q", "--python", str(python), "--override", str(OVERRIDES), *packages],
        [str(uv), "pip", "uninstall", "-q", "--python", str(python), "tidemark"],
    ]
    for step in steps:
        done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(step[:3])} failed: {done.stderr[-2000:]}")
    (folder / ".complete").write_text("")
    return ClientOnly(python)
