"""A fault and latency proxy for HTTP storage servers (Azurite, moto): what a real cloud round trip does to Spark.

It forwards each request byte for byte (so signatures stay valid), and can add a fixed delay per request,
answer a share of requests with 503 (Azure's ServerBusy, S3's SlowDown), refuse every connection for a while
(the server "stopped"), and run a hook when a request matches (e.g. SIGKILL the driver on the PUT of
`commits/3`, before that PUT reaches the server). It counts requests by kind (list, read, write, delete,
metadata), which the benchmarks report. Threads, one per connection; HTTP/1.1 framing only (Content-Length,
chunked, or until close).
"""

from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

_NO_BODY_STATUS = {204, 304}


@dataclass(frozen=True)
class Request:
    """One request as the proxy saw it."""

    method: str
    target: str  # path and query
    headers: dict[str, str]

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    @property
    def kind(self) -> str:
        """list, read, write, delete or metadata (Azure Blob and S3 alike)."""
        query = self.query
        if self.method == "GET" and (query.get("comp") == ["list"] or "list-type" in query or self._bucket_get()):
            return "list"
        if self.method == "GET":
            return "read"
        if self.method in ("PUT", "POST"):
            return "write"
        if self.method == "DELETE":
            return "delete"
        return "metadata"  # HEAD: blob/object properties, existence checks

    def _bucket_get(self) -> bool:
        # S3 ListObjects v1: GET /bucket?prefix=... (path-style, no key)
        return "prefix" in self.query and self.path.strip("/").count("/") == 0


Hook = Callable[[Request], bool]  # True: drop the request (the connection is closed without an answer)


@dataclass
class FaultProxy:
    """A proxy on 127.0.0.1:port in front of 127.0.0.1:upstream_port."""

    port: int
    upstream_port: int
    latency: float = 0.0  # seconds added before each request is forwarded
    error_rate: float = 0.0  # share of requests answered 503 without forwarding
    error_body: str = "azure"  # "azure" (ServerBusy) or "s3" (SlowDown)
    seed: int = 27
    counts: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    hooks: list[tuple[re.Pattern[str], str, Hook]] = field(default_factory=list)
    _down_until: float = 0.0
    _listener: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _random: random.Random = field(init=False)
    _stopped: threading.Event = field(default_factory=threading.Event)
    log: list[tuple[str, str]] = field(default_factory=list)  # (method, target) of every request, in order
    keep_log: bool = False

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        thread = threading.Thread(target=self._accept, name=f"fault-proxy-{self.port}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._listener is not None:
            self._listener.close()
        self._close_all()

    def on(self, method: str, path_pattern: str, hook: Hook) -> None:
        """Run hook for requests of this method whose path matches the pattern (re.search)."""
        with self._lock:
            self.hooks.append((re.compile(path_pattern), method, hook))

    def clear_hooks(self) -> None:
        with self._lock:
            self.hooks.clear()

    def down(self, seconds: float) -> None:
        """Refuse every connection for this long, starting now (open connections are cut)."""
        self._down_until = time.monotonic() + seconds
        self._close_all()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.errors = 0
            self.log.clear()

    @property
    def is_down(self) -> bool:
        return time.monotonic() < self._down_until

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _close_all(self) -> None:
        with self._lock:
            sockets = list(self._open)
            self._open.clear()
        for sock in sockets:
            _reset(sock)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.is_down:
                _reset(client)
                continue
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        with self._lock:
            self._open.add(client)
        try:
            reader = client.makefile("rb")
            while True:
                head = _read_head(reader)
                if head is None:
                    return
                request_line, headers, raw_head = head
                method, target, _ = request_line.split(" ", 2)
                if headers.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # the server's own 100 is skipped below
                body = _read_body(reader, headers, is_request=True)
                request = Request(method, target, headers)
                if self.is_down:
                    return
                with self._lock:
                    self.counts[request.kind] += 1
                    if self.keep_log:
                        self.log.append((method, target))
                    hooks = [h for pattern, m, h in self.hooks if m == method and pattern.search(request.path)]
                if any(hook(request) for hook in hooks):
                    return  # dropped: the client sees the connection close, the server never sees the request
                if self.latency:
                    time.sleep(self.latency)
                if self.error_rate and self._draw() < self.error_rate:
                    with self._lock:
                        self.errors += 1
                    client.sendall(_busy(self.error_body))
                    return
                status_head = None
                for _ in range(2):
                    reused = upstream is not None
                    if upstream is None:
                        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=300)
                        with self._lock:
                            self._open.add(upstream)
                        up_reader = upstream.makefile("rb")
                    try:
                        upstream.sendall(raw_head + body)
                        status_head = _read_head(up_reader)
                    except OSError:
                        status_head = None
                    if status_head is not None or not reused:
                        break
                    # The server closed a kept-alive connection while it idled (Azurite after 5 s): nothing of
                    # the request reached it, so it goes once more on a new connection, as an HTTP client does
                    # (cutting the client off instead made the Azure SDK back off ~18 s before its retry).
                    with self._lock:
                        self._open.discard(upstream)
                    upstream.close()
                    upstream = None
                while status_head is not None and status_head[0].split(" ", 2)[1].startswith("1"):
                    status_head = _read_head(up_reader)  # interim answers (100 Continue) were given already
                if status_head is None:
                    return
                status_line, response_headers, raw_response_head = status_head
                status = int(status_line.split(" ", 2)[1])
                if method == "HEAD" or status in _NO_BODY_STATUS:
                    response_body = b""
                else:
                    response_body = _read_body(up_reader, response_headers, is_request=False)
                client.sendall(raw_response_head + response_body)
                if response_headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._open.discard(client)
                if upstream is not None:
                    self._open.discard(upstream)
            _reset(client)
            if upstream is not None:
                upstream.close()

    def _draw(self) -> float:
        with self._lock:
            return self._random.random()


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _read_head(reader: object) -> tuple[str, dict[str, str], bytes] | None:
    raw = b""
    first = ""
    headers: dict[str, str] = {}
    while True:
        line = reader.readline(65537)  # type: ignore[attr-defined]
        if not line:
            return None
        raw += line
        if line in (b"\r\n", b"\n"):
            if not first:  # stray CRLF between messages
                raw = b""
                continue
            return first, headers, raw
        text = line.decode("latin-1").rstrip("\r\n")
        if not first:
            first = text
            continue
        name, _, value = text.partition(":")
        headers[name.strip().lower()] = value.strip()


def _read_body(reader: object, headers: dict[str, str], *, is_request: bool) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = b""
        while True:
            size_line = reader.readline(65537)  # type: ignore[attr-defined]
            out += size_line
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = reader.readline(65537)  # type: ignore[attr-defined]
                    out += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return out
            out += reader.read(size + 2)  # type: ignore[attr-defined]
    if "content-length" in headers:
        return reader.read(int(headers["content-length"]))  # type: ignore[attr-defined, no-any-return]
    if is_request:
        return b""
    return reader.read()  # type: ignore[attr-defined, no-any-return]  # until the server closes


def _busy(kind: str) -> bytes:
    if kind == "s3":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            "<Message>Please reduce your request rate.</Message></Error>"
        )
        extra = "x-amz-request-id: fault-proxy\r\n"
    else:
        body = (
            '<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
            "<Message>The server is busy.</Message></Error>"
        )
        extra = "x-ms-request-id: fault-proxy\r\nx-ms-error-code: ServerBusy\r\n"
    data = body.encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        f"Content-Type: application/xml\r\nContent-Length: {len(data)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode() + data
