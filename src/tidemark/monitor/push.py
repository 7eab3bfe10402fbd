"""Push the run's metrics to a Prometheus Pushgateway, grouped by pipeline and run id, from a thread of its own."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from tidemark.errors import TidemarkError, UsageError
from tidemark.monitor.metrics import CONTENT_TYPE, MetricsRegistry

log = logging.getLogger(__name__)

_PLAIN_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")


class PushFailed(TidemarkError):
    """The Pushgateway could not be reached or refused a request."""


def _segment(name: str, value: str) -> str:
    """One `name/value` pair of a grouping-key path; values that are not plain are sent base64 (Pushgateway rule)."""
    if _PLAIN_SEGMENT.match(value):
        return f"{name}/{value}"
    encoded = base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii")
    return f"{name}@base64/{encoded or '='}"


@dataclass(frozen=True)
class Gateway:
    """Where a Pushgateway is (credentials taken out of the URL) and how long a request may take."""

    base_url: str
    job: str
    timeout: float
    authorization: str | None = None

    @classmethod
    def from_url(cls, url: str, job: str = "tidemark", timeout: float = 5.0) -> Gateway:
        """Parse `http(s)://[user:password@]host[:port][/prefix]`; user and password become Basic auth."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"the Pushgateway address must look like http://host:9091, not {redact(url)!r}"
            raise UsageError(msg)
        authorization = None
        if parts.username is not None:
            pair = f"{parts.username}:{parts.password or ''}".encode()
            authorization = "Basic " + base64.b64encode(pair).decode("ascii")
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return cls(base_url=base, job=job, timeout=timeout, authorization=authorization)

    def group_url(self, grouping: Mapping[str, str]) -> str:
        """The URL of one group: /metrics/job/<job>/<label>/<value>..."""
        path = "/".join(_segment(name, value) for name, value in {"job": self.job, **grouping}.items())
        return f"{self.base_url}/metrics/{path}"

    def _request(self, method: str, url: str, body: bytes | None = None) -> bytes:
        request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 (http(s) checked in from_url)
        if body is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        if self.authorization is not None:
            request.add_header("Authorization", self.authorization)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace").strip().splitlines()
            msg = f"{method} {self.base_url} answered {exc.code} {exc.reason}" + (f": {detail[0]}" if detail else "")
            raise PushFailed(msg) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            msg = f"cannot reach {self.base_url}: {reason}"
            raise PushFailed(msg) from exc

    def push(self, grouping: Mapping[str, str], text: str) -> None:
        """Replace the group's metrics with text (HTTP PUT)."""
        self._request("PUT", self.group_url(grouping), text.encode("utf-8"))

    def delete(self, grouping: Mapping[str, str]) -> None:
        """Delete one group."""
        self._request("DELETE", self.group_url(grouping))

    def groups(self) -> list[dict[str, str]]:
        """The grouping keys of every group the Pushgateway holds (its /api/v1/metrics)."""
        answer = json.loads(self._request("GET", f"{self.base_url}/api/v1/metrics"))
        return [dict(group.get("labels") or {}) for group in answer.get("data") or []]


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class GatewayPusher:
    """Pushes the registry after each change on its own thread; the final push happens in close().

    Pushes coalesce: a change while a push is in flight leads to one more push of the newest figures. The first
    failure is reported with warn (one line); later ones only at debug level, and the run always goes on.
    """

    def __init__(
        self,
        registry: MetricsRegistry,
        gateway: Gateway,
        grouping: Mapping[str, str],
        *,
        delete_previous: bool = True,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.registry = registry
        self.gateway = gateway
        self.grouping = dict(grouping)
        self.delete_previous = delete_previous
        self.pushes = 0
        self.failures = 0
        self.deleted: list[dict[str, str]] = []
        self._warn = warn
        self._warned = False
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the pushing thread and push the run's first figures."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="tidemark-push", daemon=True)
        self._thread.start()
        self._wake.set()

    def request(self) -> None:
        """Ask for a push of the current figures (returns at once)."""
        self._wake.set()

    def close(self) -> bool:
        """Push the final figures and stop; waits at most a few request timeouts. True when the last push worked."""
        if self._thread is None:
            return False
        last_failures = self.failures
        self._closing.set()
        self._wake.set()
        limit = 3 * self.gateway.timeout + 1
        done = self._closed.wait(limit)
        self._thread.join(timeout=0.5 if done else 0)
        self._thread = None
        if not done:
            self._failed(f"the final push to {self.gateway.base_url} did not finish within {limit:.0f}s")
            return False
        return self.failures == last_failures

    def _loop(self) -> None:
        try:
            if self.delete_previous:
                self._attempt(self._delete_previous_runs)
            while True:
                self._wake.wait()
                self._wake.clear()
                final = self._closing.is_set()
                if self._attempt(lambda: self.gateway.push(self.grouping, self.registry.render())):
                    self.pushes += 1
                if final:
                    return
        finally:
            self._closed.set()

    def _attempt(self, action: Callable[[], None]) -> bool:
        try:
            action()
        except PushFailed as exc:
            self._failed(str(exc))
            return False
        except Exception as exc:  # a bug here must never reach the run
            self._failed(f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _failed(self, reason: str) -> None:
        self.failures += 1
        if self._warned:
            log.debug("metrics push failed again: %s", reason)
            return
        self._warned = True
        self._warn(
            f"could not push metrics to the Pushgateway ({reason}); the run goes on and keeps trying "
            "(check [monitor] pushgateway)"
        )

    def _delete_previous_runs(self) -> None:
        """Delete the groups this pipeline's earlier runs left (only exact job/pipeline/run_id keys)."""
        ours = {"job": self.gateway.job, **self.grouping}
        for labels in self.gateway.groups():
            if set(labels) != set(ours) or labels == ours:
                continue
            if all(labels[key] == ours[key] for key in ours if key != "run_id"):
                self.gateway.delete({k: v for k, v in labels.items() if k != "job"})
                self.deleted.append(labels)
