"""Pushing to a real Pushgateway (Debian's prometheus-pushgateway, no JVM), and every way pushing or serving can go
wrong without failing the run."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.prometheus_stack import Service, free_port, http_get, pushgateway_samples, start_pushgateway, wait_for
from tests.unit.test_monitor_metrics import _progress
from tidemark.config import parse_config
from tidemark.config.model import MonitorConfig
from tidemark.errors import ConfigError, UsageError
from tidemark.monitor.metrics import MetricsRegistry, RunState
from tidemark.monitor.publish import MetricsPublisher, endpoint_lines
from tidemark.monitor.push import Gateway, GatewayPusher, PushFailed, redact


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = start_pushgateway(tmp_path_factory.mktemp("pushgateway"))
    yield service
    service.stop()


def _labels(pipeline: str, run_id: str, **extra: str) -> frozenset[tuple[str, str]]:
    base = {"job": "tidemark", "instance": "", "pipeline": pipeline, "run_id": run_id, **extra}
    return frozenset(base.items())


def _group(url: str, pipeline: str, run_id: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        key: value
        for key, value in pushgateway_samples(url).items()
        if ("pipeline", pipeline) in key[1] and ("run_id", run_id) in key[1]
    }


def test_pushes_after_changes_and_the_final_state_at_close(pushgateway: Service) -> None:
    registry = MetricsRegistry("push-a", "run-1", 300)
    registry.begin()
    pusher = GatewayPusher(registry, Gateway.from_url(pushgateway.url), {"pipeline": "push-a", "run_id": "run-1"})
    pusher.start()
    running = _labels("push-a", "run-1", state="running")
    wait_for(lambda: _group(pushgateway.url, "push-a", "run-1").get(("tidemark_run_state", running)) == 1, 10, "push")
    registry.update(_progress(4, name="push-a"))
    pusher.request()
    batch = ("tidemark_batch_id", _labels("push-a", "run-1", query="push-a"))
    wait_for(lambda: _group(pushgateway.url, "push-a", "run-1").get(batch) == 4, 10, "the batch to be pushed")
    registry.update(_progress(5, name="push-a"))
    registry.finish(RunState.FINISHED)
    assert pusher.close()  # the final push happens in close, without another request
    final = _group(pushgateway.url, "push-a", "run-1")
    assert final[batch] == 5
    assert final[("tidemark_run_state", _labels("push-a", "run-1", state="finished"))] == 1
    assert final[("tidemark_run_state", running)] == 0
    assert pusher.failures == 0 and pusher.pushes >= 3


def test_a_run_deletes_the_groups_of_its_pipelines_earlier_runs(pushgateway: Service) -> None:
    gateway = Gateway.from_url(pushgateway.url)
    for pipeline, run_id in (("push-b", "old-1"), ("push-b", "old-2"), ("push-other", "old-1")):
        registry = MetricsRegistry(pipeline, run_id)
        registry.begin()
        gateway.push({"pipeline": pipeline, "run_id": run_id}, registry.render())
    assert _group(pushgateway.url, "push-b", "old-1")
    registry = MetricsRegistry("push-b", "new")
    registry.begin()
    pusher = GatewayPusher(registry, gateway, {"pipeline": "push-b", "run_id": "new"})
    pusher.start()
    registry.finish(RunState.FINISHED)
    assert pusher.close()
    assert not _group(pushgateway.url, "push-b", "old-1") and not _group(pushgateway.url, "push-b", "old-2")
    assert _group(pushgateway.url, "push-other", "old-1")  # another pipeline's group stays
    assert _group(pushgateway.url, "push-b", "new")
    assert sorted(d["run_id"] for d in pusher.deleted) == ["old-1", "old-2"]
    keep = GatewayPusher(registry, gateway, {"pipeline": "push-other", "run_id": "x"}, delete_previous=False)
    keep.start()
    assert keep.close()
    assert _group(pushgateway.url, "push-other", "old-1")


def test_label_values_that_are_not_plain_go_base64_and_come_back_intact(pushgateway: Service) -> None:
    gateway = Gateway.from_url(pushgateway.url + "/", job="tide/mark")
    assert (
        gateway.group_url({"pipeline": "a.b"})
        == f"{pushgateway.url}/metrics/job@base64/dGlkZS9tYXJr/pipeline@base64/YS5i"
    )
    registry = MetricsRegistry("a.b", "r/1")
    registry.begin()
    gateway.push({"pipeline": "a.b", "run_id": "r/1"}, registry.render())
    samples = pushgateway_samples(pushgateway.url)
    assert any(("pipeline", "a.b") in labels and ("job", "tide/mark") in labels for _, labels in samples)
    gateway.delete({"pipeline": "a.b", "run_id": "r/1"})
    assert not any(("pipeline", "a.b") in labels for _, labels in pushgateway_samples(pushgateway.url))


def test_an_unreachable_gateway_is_one_warning_and_never_blocks(tmp_path: Path) -> None:
    warnings: list[str] = []
    registry = MetricsRegistry("push-c", "r1")
    registry.begin()
    port = free_port()  # nothing listens there
    gateway = Gateway.from_url(f"http://127.0.0.1:{port}", timeout=1)
    pusher = GatewayPusher(registry, gateway, {"pipeline": "push-c"}, warn=warnings.append)
    pusher.start()
    for _ in range(5):
        began = time.monotonic()
        pusher.request()
        assert time.monotonic() - began < 0.1
        time.sleep(0.05)
    registry.finish(RunState.FAILED)
    assert not pusher.close()
    assert pusher.failures >= 2
    assert len(warnings) == 1
    assert f"127.0.0.1:{port}" in warnings[0] and "the run goes on" in warnings[0]


def test_a_gateway_that_never_answers_is_bounded_by_the_timeout() -> None:
    """A socket that accepts and never replies: each request gives up after the timeout; close waits a bounded time."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        warnings: list[str] = []
        registry = MetricsRegistry("push-d", "r1")
        registry.begin()
        gateway = Gateway.from_url(f"http://127.0.0.1:{port}", timeout=0.5)
        pusher = GatewayPusher(registry, gateway, {"pipeline": "push-d"}, warn=warnings.append)
        began = time.monotonic()
        pusher.start()
        pusher.request()
        registry.finish(RunState.FINISHED)
        assert not pusher.close()
        took = time.monotonic() - began
    assert took < 3 * 0.5 + 1 + 0.5  # close's own limit plus a little
    assert len(warnings) == 1 and "timed out" in warnings[0]


def test_http_errors_name_the_status() -> None:
    gateway = Gateway.from_url("http://127.0.0.1:1", timeout=1)
    with pytest.raises(PushFailed, match=r"cannot reach http://127\.0\.0\.1:1"):
        gateway.push({"pipeline": "x"}, "")


def test_http_error_answer(pushgateway: Service) -> None:
    gateway = Gateway.from_url(pushgateway.url)
    with pytest.raises(PushFailed, match="answered 400"):
        gateway.push({"pipeline": "x", "run_id": "y"}, "this is not the text format\n")


def test_credentials_in_the_url_become_basic_auth_and_never_appear_in_messages() -> None:
    gateway = Gateway.from_url("https://ops:s3cret@push.example.com:9443/prefix/", timeout=2)
    assert gateway.base_url == "https://push.example.com:9443/prefix"
    assert gateway.authorization == "Basic b3BzOnMzY3JldA=="
    assert redact("https://ops:s3cret@push.example.com:9443") == "https://ops:***@push.example.com:9443"
    with pytest.raises(UsageError, match="http://host:9091"):
        Gateway.from_url("ftp://ops:s3cret@x")
    lines = endpoint_lines(MonitorConfig(pushgateway="https://ops:s3cret@push.example.com:9443"))
    assert lines and "s3cret" not in lines[0] and "ops:***@push.example.com" in lines[0]


def test_basic_auth_header_reaches_the_server() -> None:
    seen: list[str | None] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                head = conn.recv(65536).decode()
                auth = [line for line in head.split("\r\n") if line.lower().startswith("authorization:")]
                seen.append(auth[0].split(":", 1)[1].strip() if auth else None)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        thread = threading.Thread(target=answer)
        thread.start()
        Gateway.from_url(f"http://ops:s3cret@127.0.0.1:{port}", timeout=5).push({"pipeline": "x"}, "")
        thread.join(5)
    assert seen == ["Basic b3BzOnMzY3JldA=="]


def test_port_in_use_is_one_warning_and_no_endpoint() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        warnings: list[str] = []
        publisher = MetricsPublisher(MetricsRegistry("p", "r"), MonitorConfig(metrics_port=port), warn=warnings.append)
        publisher.start()
        assert publisher.port is None and publisher.url is None
        publisher.changed()
        publisher.stop()
    assert len(warnings) == 1
    assert f"127.0.0.1:{port}" in warnings[0] and "the run goes on without the endpoint" in warnings[0]


def test_publisher_serves_and_pushes(pushgateway: Service) -> None:
    registry = MetricsRegistry("push-e", "r1")
    registry.begin()
    config = MonitorConfig(metrics_port=0, pushgateway=pushgateway.url, pushgateway_timeout=timedelta(seconds=2))
    publisher = MetricsPublisher(registry, config)
    publisher.start()
    try:
        assert publisher.url is not None and publisher.url.startswith("http://127.0.0.1:")
        registry.update(_progress(9, name="push-e"))
        publisher.changed()
        assert 'tidemark_batch_id{pipeline="push-e",run_id="r1",query="push-e"} 9' in http_get(publisher.url)
        wait_for(
            lambda: (
                _group(pushgateway.url, "push-e", "r1").get(
                    ("tidemark_batch_id", _labels("push-e", "r1", query="push-e"))
                )
                == 9
            ),
            10,
            "the push",
        )
    finally:
        publisher.stop()
        publisher.stop()


def test_endpoint_lines_say_where_metrics_go() -> None:
    assert endpoint_lines(MonitorConfig()) == []
    assert endpoint_lines(MonitorConfig(metrics_port=9108)) == ["metrics: http://127.0.0.1:9108/metrics"]
    remote = endpoint_lines(MonitorConfig(metrics_port=9108, metrics_host="0.0.0.0", metrics_allow_remote=True))
    assert remote == ["metrics: http://0.0.0.0:9108/metrics (reachable from other hosts: metrics_allow_remote = true)"]
    assert endpoint_lines(MonitorConfig(metrics_port=0, metrics_host="::1")) == [
        "metrics: http://[::1]:<a free port>/metrics"
    ]


BASE = {
    "pipeline": {"name": "p"},
    "source": {"format": "rate"},
    "event_time": {"column": "timestamp"},
    "aggregation": {"key": ["k"], "window": "1 minute"},
    "sink": {"format": "console"},
    "checkpoint": {"location": "/tmp/ckpt"},
    "quarantine": {"path": "/tmp/q"},
}


@pytest.mark.parametrize(
    ("monitor", "message"),
    [
        ({"metrics_host": "0.0.0.0", "metrics_port": 9108}, "metrics_allow_remote = true"),
        ({"metrics_host": "10.1.2.3"}, "metrics_allow_remote = true"),
        ({"pushgateway": "pushgateway:9091"}, "http://pushgateway:9091"),
        ({"pushgateway": "http://h:9091/?x=1"}, "http://pushgateway:9091"),
        ({"pushgateway": "http://h:9091", "pushgateway_timeout": "0s"}, "pushgateway_timeout"),
    ],
)
def test_bad_monitor_settings_are_config_errors(monitor: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, "monitor": monitor})


def test_loopback_hosts_need_no_extra_setting() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        assert parse_config({**BASE, "monitor": {"metrics_host": host}}).monitor.metrics_host == host
    config = parse_config({**BASE, "monitor": {"metrics_host": "0.0.0.0", "metrics_allow_remote": True}})
    assert config.monitor.metrics_allow_remote


def test_the_docs_monitor_block_is_a_valid_config(tmp_path: Path) -> None:
    import re

    from tidemark.compat import tomllib

    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(\[monitor\]\n.*?)```", docs, re.S)
    assert block is not None
    monitor = tomllib.loads(block.group(1))["monitor"]
    config = parse_config({**BASE, "monitor": monitor})
    assert config.monitor.metrics_port == 9108 and config.monitor.pushgateway == "http://pushgateway:9091"
