"""Where a run's metrics go: the scrape endpoint and the Pushgateway; neither can fail a run."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidemark.config.model import MonitorConfig, is_loopback
from tidemark.monitor.metrics import MetricsRegistry, MetricsServer
from tidemark.monitor.push import Gateway, GatewayPusher, redact

log = logging.getLogger(__name__)


def endpoint_lines(monitor: MonitorConfig) -> list[str]:
    """What `tidemark run` prints at start about its metrics: the endpoint (and whether other hosts reach it), the
    Pushgateway."""
    lines = []
    if monitor.metrics_port is not None:
        port = str(monitor.metrics_port) if monitor.metrics_port else "<a free port>"
        line = f"metrics: http://{_host(monitor.metrics_host)}:{port}/metrics"
        if not is_loopback(monitor.metrics_host):
            line += " (reachable from other hosts: metrics_allow_remote = true)"
        lines.append(line)
    if monitor.pushgateway is not None:
        lines.append(
            f"pushgateway: {redact(monitor.pushgateway)} (job {monitor.pushgateway_job}, grouped by pipeline and "
            "run_id; pushed after every batch and at stop)"
        )
    return lines


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class MetricsPublisher:
    """Serves the registry on [monitor] metrics_port and pushes it to [monitor] pushgateway.

    A port in use or an unreachable Pushgateway is one warning (through warn) and the run goes on without it.
    changed() never blocks: pushes run on the pusher's own thread, never on Spark's listener thread.
    """

    def __init__(
        self, registry: MetricsRegistry, monitor: MonitorConfig, warn: Callable[[str], None] = log.warning
    ) -> None:
        self.registry = registry
        self.monitor = monitor
        self._warn = warn
        self._server: MetricsServer | None = None
        self.pusher: GatewayPusher | None = None

    @property
    def port(self) -> int | None:
        """The bound metrics port (None when not serving)."""
        return self._server.port if self._server is not None else None

    @property
    def url(self) -> str | None:
        """The scrape URL (None when not serving)."""
        port = self.port
        return None if port is None else f"http://{_host(self.monitor.metrics_host)}:{port}/metrics"

    def start(self) -> None:
        """Bind the endpoint and start the pusher, as configured."""
        if self.monitor.metrics_port is not None:
            server = MetricsServer(self.registry, self.monitor.metrics_host, self.monitor.metrics_port)
            try:
                server.start()
            except OSError as exc:
                self._warn(
                    f"cannot serve metrics on {self.monitor.metrics_host}:{self.monitor.metrics_port}: "
                    f"{exc.strerror or exc}; the run goes on without the endpoint (choose another "
                    "[monitor] metrics_port, or 0 for a free one)"
                )
            else:
                self._server = server
        if self.monitor.pushgateway is not None:
            gateway = Gateway.from_url(
                self.monitor.pushgateway, self.monitor.pushgateway_job, self.monitor.pushgateway_timeout.total_seconds()
            )
            grouping = {"pipeline": self.registry.pipeline or "", "run_id": self.registry.run_id or ""}
            self.pusher = GatewayPusher(
                self.registry,
                gateway,
                grouping,
                delete_previous=self.monitor.pushgateway_delete_previous,
                warn=self._warn,
            )
            self.pusher.start()

    def changed(self) -> None:
        """The figures changed: push them (asynchronously)."""
        if self.pusher is not None:
            self.pusher.request()

    def stop(self) -> None:
        """Push the final figures (bounded wait) and stop serving; safe to call twice."""
        pusher, self.pusher = self.pusher, None
        if pusher is not None:
            pusher.close()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
