"""Benchmark: `checkpoint inspect` of a large checkpoint on Azurite vs a per-folder walk, same client.

Run by hand: `.venv/bin/python benchmarks/azure_listing.py [--blobs N] [--rounds R] [--threads T] [--latency-ms L,..]`.

Starts Azurite (tools/azurite, in memory, or in --location) on a free loopback port, uploads a synthetic checkpoint of N
blobs (offsets/commits entries, 200 state partitions of delta files and their checksums) with T threads,
then for each latency L (a proxy in front of Azurite holds every request L ms before passing it on: a
stand-in for the round trip and service time of a real storage account, which loopback does not have;
0 = no delay) alternates, R rounds each:
  A. tidemark's inspect (`inspect_checkpoint` on the wasbs:// URI: one flat paged listing + small folders),
  B. a per-folder walk through the azure-storage-blob client (one delimiter listing per folder, what a
     hierarchical FileSystem listing does), collecting the same (name, size) pairs;
  C. the same flat listing as A's, through the SDK's `list_blobs` and its model objects (what tidemark did
     before it parsed the pages itself), collecting the same pairs;
  D. the floor: the same flat pages fetched through the SDK's pipeline and dropped unparsed, i.e. the storage
     server's own time to answer, which any listing of these blobs pays (on loopback it bounds walk / inspect).
List requests are counted by the proxy (every request goes through it; 0 ms = no delay), and with
--server-log also from Azurite's own debug log (requests with comp=list). The debug log slows Azurite down
badly past some 10,000 uploads (it buffers and falls behind), so it is off by default; the test suite checks
that tidemark's own count agrees with Azurite's (tests/storage/test_stores.py). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import ACCOUNT, AZURITE_BIN, _stop, _wait_for_port, azurite_account_key, free_port

from tidemark.storage.azure import PAGE_SIZE
from tidemark.storage.azure_list import fetch_page, next_marker_of, raw_sender

OFFSET = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"logOffset":0}'
COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'


def _content(name: str, size: int) -> bytes:
    if name.startswith("offsets/"):
        return OFFSET
    if name.startswith("commits/"):
        return COMMIT
    if name == "metadata":
        return b'{"id":"bench"}'
    return b"x" * size


def _names(blobs: int, partitions: int = 200) -> list[tuple[str, int]]:
    per_version = 2  # <v>.delta and .<v>.delta.crc
    versions = max(1, (blobs - 2) // (partitions * per_version + 2))
    names: list[tuple[str, int]] = [("metadata", 20)]
    for b in range(versions):
        names += [(f"offsets/{b}", 90), (f"commits/{b}", 30)]
    for p in range(partitions):
        for v in range(1, versions + 1):
            names += [(f"state/0/{p}/{v}.delta", 180), (f"state/0/{p}/.{v}.delta.crc", 12)]
    return names[:blobs]


def _walk(container: Any, prefix: str, found: list[tuple[str, int]]) -> None:
    for item in container.walk_blobs(name_starts_with=prefix, delimiter="/"):
        if hasattr(item, "size") and item.size is not None and not item.name.endswith("/"):
            found.append((item.name, int(item.size)))
        else:
            _walk(container, item.name, found)


class LatencyProxy:
    """TCP proxy on a free loopback port: each chunk a client sends waits delay seconds before it is passed on.

    A List Blobs request is one chunk, so each request gains one delay; the answers flow back undelayed. It also
    counts the List Blobs requests that pass (`comp=list` in a request line), whoever sends them.
    """

    def __init__(self, target_port: int, delay: float) -> None:
        self.delay = delay
        self.lists = 0
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        try:
            while chunk := source.recv(1 << 16):
                if requests:
                    self.lists += len(re.findall(rb"^GET [^ ]*comp=list", chunk, re.M))
                    if self.delay:
                        time.sleep(self.delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def _raw_pages(container: Any, prefix: str) -> int:
    """Fetch every flat List Blobs page of prefix through the SDK's pipeline, unparsed; return the blobs' count."""
    send = raw_sender(container)
    assert send is not None
    marker, blobs = "", 0
    while True:
        status, body = fetch_page(container, send, prefix, False, PAGE_SIZE, marker)
        assert status == 200, status
        blobs += body.count(b"<Blob>")
        marker = next_marker_of(body)
        if not marker:
            return blobs


def _spread(slow: list[tuple[float, int]], fast: list[tuple[float, int]]) -> dict[str, float]:
    """Per-round time ratios slow / fast: median, min and max."""
    ratios = [s[0] / f[0] for f, s in zip(fast, slow, strict=True)]
    return {
        "median": round(statistics.median(ratios), 2),
        "min": round(min(ratios), 2),
        "max": round(max(ratios), 2),
    }


def _requests(debug: Path) -> int:
    text = debug.read_text(encoding="utf-8", errors="replace")
    return text.count("comp=list")


def _measure(
    proxy: LatencyProxy, walker: Any, uri: str, expected: int, rounds: int, debug: Path | None
) -> dict[str, Any]:
    """A, B, C and D alternating for rounds; per measurement time and list requests, and the ratios to A."""
    from tidemark.doctor.inspect import inspect_checkpoint

    rows: dict[str, list[tuple[float, int]]] = {"inspect": [], "walk": [], "sdk-flat": [], "raw-pages": []}
    server: dict[str, list[int]] = {name: [] for name in rows}

    def timed(name: str, run: Callable[[], int]) -> None:
        """Run one listing, record its time and list requests under name; it must see every blob."""
        before = _requests(debug) if debug else 0
        proxy.lists = 0
        t0 = time.monotonic()
        seen = run()
        rows[name].append((time.monotonic() - t0, proxy.lists))
        server[name].append(_requests(debug) - before if debug else -1)
        assert seen == expected, (name, seen, expected)

    def walk() -> int:
        found: list[tuple[str, int]] = []
        _walk(walker, "ck/", found)
        return len(found)

    def sdk_flat() -> int:
        listing = walker.list_blobs(name_starts_with="ck/", include=["metadata"], results_per_page=PAGE_SIZE)
        return len([(blob.name, int(blob.size)) for blob in listing])

    for _ in range(rounds):
        timed("inspect", lambda: inspect_checkpoint(uri).files_total)
        timed("walk", walk)
        timed("sdk-flat", sdk_flat)
        # D. the floor: the same flat pages fetched raw, bodies read and dropped, nothing parsed. What the
        # storage server itself takes to answer; any listing of these blobs pays at least this.
        timed("raw-pages", lambda: _raw_pages(walker, "ck/"))
    entry: dict[str, Any] = {}
    for name, values in rows.items():
        times = [t for t, _ in values]
        entry[name] = {
            "median_s": round(statistics.median(times), 2),
            "min_s": round(min(times), 2),
            "max_s": round(max(times), 2),
            "list_requests": max(r for _, r in values),
            "list_requests_seen_by_azurite": max(server[name]) if debug else None,
        }
    entry["walk_over_inspect"] = _spread(rows["walk"], rows["inspect"])
    entry["sdk_flat_over_inspect"] = _spread(rows["sdk-flat"], rows["inspect"])
    return entry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--latency-ms", default="0", help="comma-separated per-request delays to measure")
    parser.add_argument("--server-log", action="store_true", help="also count requests in Azurite's debug log")
    parser.add_argument(
        "--location",
        type=Path,
        help="keep Azurite's data in this folder instead of memory; a later run with the same folder and --blobs "
        "skips the upload (Azurite's uploads slow down as the container grows: 100,000 take the better part of "
        "an hour)",
    )
    args = parser.parse_args()
    from azure.storage.blob import BlobServiceClient

    folder = Path(tempfile.mkdtemp(prefix="azurite-bench-"))
    debug = folder / "debug.log"
    port = free_port()
    import subprocess

    command = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--disableTelemetry"]
    if args.location:
        args.location.mkdir(parents=True, exist_ok=True)
        command += ["--location", str(args.location)]
    else:
        command += ["--inMemoryPersistence"]
    command += ["--skipApiVersionCheck"]
    if args.server_log:
        command += ["--debug", str(debug)]
    log = folder / "azurite.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_port(port, process, "azurite-blob", log)
        key = azurite_account_key()

        def connection(to_port: int) -> str:
            endpoint = f"http://127.0.0.1:{to_port}/{ACCOUNT}"
            return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};"

        service = BlobServiceClient.from_connection_string(connection(port))
        container = service.get_container_client("bench")
        if not container.exists():
            container.create_container()
        names = _names(args.blobs)
        started = time.monotonic()

        def put(item: tuple[str, int]) -> None:
            blob = container.get_blob_client(f"ck/{item[0]}")
            if args.location and blob.exists():  # a kept upload being finished
                return
            blob.upload_blob(_content(*item), overwrite=True)

        uploaded = _raw_pages(container, "ck/") if args.location else 0
        if uploaded != len(names):
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(put, names))
        upload_s = time.monotonic() - started
        uri = f"wasbs://bench@{ACCOUNT}.blob.core.windows.net/ck"
        result: dict[str, Any] = {"blobs": len(names), "rounds": args.rounds, "upload_s": round(upload_s, 1)}
        result["request_budget"] = len(names) // 5000 + 20
        for latency_ms in [float(x) for x in args.latency_ms.split(",")]:
            proxy = LatencyProxy(port, latency_ms / 1000)
            conn = connection(proxy.port)
            os.environ["AZURE_STORAGE_CONNECTION_STRING"] = conn
            walker = BlobServiceClient.from_connection_string(conn).get_container_client("bench")
            entry = _measure(proxy, walker, uri, len(names), args.rounds, debug if args.server_log else None)
            proxy.close()
            result[f"latency_{latency_ms:g}ms"] = entry
            print(json.dumps({f"latency_{latency_ms:g}ms": entry}), flush=True)
        print(json.dumps(result, indent=1))
    finally:
        _stop(process)


if __name__ == "__main__":
    main()
