"""The tests' fault proxy (tests/fault_proxy.py) against a tiny HTTP/1.1 server that, like Azurite, closes a
kept-alive connection once it has idled a moment."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.fault_proxy import FaultProxy

IDLE = 0.2  # the server closes a connection that waited this long for its next request


class _IdleClosingServer:
    """Answers `200 ok` to each request; a connection with no request for IDLE seconds is closed."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(IDLE)
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline()
                if not line:
                    return
                self.requests.append(line.decode().split(" ")[1])
                while reader.readline() not in (b"\r\n", b""):
                    pass
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except (TimeoutError, OSError):
            return
        finally:
            conn.close()


@pytest.fixture
def proxied() -> Iterator[tuple[_IdleClosingServer, FaultProxy]]:
    server = _IdleClosingServer()
    proxy = FaultProxy(0, server.port).start()
    yield server, proxy
    proxy.stop()
    server.listener.close()


def test_a_request_after_the_server_closed_an_idle_connection_reaches_it(
    proxied: tuple[_IdleClosingServer, FaultProxy],
) -> None:
    server, proxy = proxied
    client = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    client.request("GET", "/first")
    assert client.getresponse().read() == b"ok"
    time.sleep(IDLE * 3)  # the server closed the proxy's upstream connection meanwhile
    client.request("GET", "/second")  # on the same client connection: the proxy must not cut it
    answer = client.getresponse()
    assert (answer.status, answer.read()) == (200, b"ok")
    assert server.requests == ["/first", "/second"] and server.connections == 2
    assert proxy.counts["read"] == 2
    client.close()
