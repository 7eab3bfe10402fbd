"""Real Prometheus, Pushgateway and promtool for the metrics tests (Debian packages, installed by `make prometheus`).

Each service runs from its own binary on 127.0.0.1 and a free port, with its data in a temp folder, and is
stopped by pid.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.monitor.metrics import parse_exposition

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    assert found, f"{name} is needed (Debian packages prometheus and prometheus-pushgateway: make prometheus)"
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode("utf-8"))


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (OSError, urllib.error.URLError, KeyError, IndexError) as exc:
            value, last_error = None, exc
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


@dataclass
class Service:
    """One started binary: its process, port and log file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def ready(self, timeout: float = 30) -> None:
        def up() -> bool:
            assert self.process.poll() is None, f"{self.name} exited: {self.log.read_text()[-2000:]}"
            http_get(f"{self.url}/-/ready", timeout=2)  # raises until it answers 200
            return True

        wait_for(up, timeout, f"{self.name} to be ready")


def _start(name: str, args: list[str], port: int, folder: Path) -> Service:
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([binary(name), *args], stdout=sink, stderr=subprocess.STDOUT, cwd=folder)
    service = Service(name, process, port, log)
    try:
        service.ready()
    except BaseException:
        service.stop()
        raise
    return service


def start_pushgateway(folder: Path) -> Service:
    port = free_port()
    args = [f"--web.listen-address=127.0.0.1:{port}", f"--persistence.file={folder / 'pushgateway.data'}"]
    return _start("prometheus-pushgateway", args, port, folder)


def scrape_config(
    job: str, targets: Iterable[str], path: str = "/metrics", honor_labels: bool = False
) -> dict[str, Any]:
    return {
        "job_name": job,
        "metrics_path": path,
        "honor_labels": honor_labels,
        "static_configs": [{"targets": list(targets)}],
    }


def start_prometheus(
    folder: Path, scrape_configs: list[dict[str, Any]], rule_files: list[str] | None = None, port: int | None = None
) -> Service:
    """Prometheus scraping and evaluating rules every second; JSON is YAML, so the config is written as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    settings = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files or [],
        "scrape_configs": scrape_configs,
    }
    config.write_text(json.dumps(settings))
    port = port or free_port()
    args = [
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    return _start("prometheus", args, port, folder)


@dataclass(frozen=True)
class PrometheusAPI:
    """The HTTP API of a running Prometheus."""

    url: str

    def query(self, expr: str) -> dict[str, Any]:
        """The whole answer of /api/v1/query (status, data or error), HTTP errors included."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            return dict(json.loads(exc.read()))

    def vector(self, expr: str) -> list[tuple[dict[str, str], float]]:
        answer = self.query(expr)
        assert answer["status"] == "success", (expr, answer)
        return [(item["metric"], float(item["value"][1])) for item in answer["data"]["result"]]

    def value(self, expr: str) -> float | None:
        """The single value of expr, None when it has no result."""
        result = self.vector(expr)
        assert len(result) <= 1, (expr, result)
        return result[0][1] if result else None

    def metric_names(self) -> set[str]:
        answer = json.loads(http_get(f"{self.url}/api/v1/label/__name__/values"))
        return set(answer["data"])

    def targets_up(self) -> dict[str, float]:
        return {item[0]["job"] + " " + item[0]["instance"]: item[1] for item in self.vector("up")}


def pushgateway_samples(url: str) -> Samples:
    return parse_exposition(http_get(f"{url}/metrics"))
