"""Issue 39: does Azurite on its SQL store (MariaDB) cost the same per request with 1,000 and 200,000 blobs?

    .venv/bin/python benchmarks/azurite_flatness.py [--blobs 200000] [--rounds 5] [--out build/azurite_flatness.json]

Starts MariaDB and Azurite on it (tests/mariadb.py: the server the ABFS tests use), one container. Phase 1: 1,000
blobs in the container (uploaded over REST). Phase 2: the container grown to --blobs. In each phase, --rounds
rounds of three sequential measurements, one client, as a restart's requests go: GET of a small blob (300 requests),
PUT of 1 KiB (150 requests, new names, so the container grows by them in both phases alike), and a listing with a
prefix and the delimiter of one folder that holds 100 blobs in both phases (100 requests; a delimited listing pages
through what lies under its prefix, so the folder's size is what both phases keep equal). The result is each
operation's median rate per phase and the ratio (1k / 200k): flat means within 1.5x. One round before phase 1 is
not counted (the first requests pay for Node's JIT and MariaDB's cold buffer pool).

How the container grows: over REST Azurite writes ~61 blobs/s here (16-19 ms of one core per PUT, spike
2026-11-27), so 199,000 more would take ~55 minutes. Phase 2 instead copies the metadata row of one real blob
(uploaded over REST) 199,000 times inside MariaDB under new names (`INSERT ... SELECT` over MariaDB's sequence
engine, seconds): the rows are what Azurite's SQL store reads and indexes, and every copy points at the same bytes.
What is measured is the metadata store's cost per request as the container grows, which is the question.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.mariadb import DATABASE, SqlAzurite, copyable_blob_columns, start_sql_azurite  # noqa: E402
from tests.servers import ACCOUNT  # noqa: E402

FOLDER_BLOBS = 100
GETS, PUTS, LISTS = 300, 150, 100


def _rate(count: int, call: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for i in range(count):
        call(i)
    return count / (time.perf_counter() - start)


def _grow_by_copies(server: SqlAzurite, container: str, seed: str, copies: int) -> None:
    """Copy the metadata row of blob `seed` `copies` times, named fill/<n>, in MariaDB."""
    select = copyable_blob_columns(server.mariadb.sql)
    chunk = 50_000
    for start in range(0, copies, chunk):
        end = min(copies, start + chunk) - 1
        server.mariadb.sql(
            f"USE {DATABASE}; INSERT INTO Blobs ({select}, blobName) "
            f"SELECT {select}, CONCAT('fill/', LPAD(seq, 7, '0')) FROM Blobs, "
            f"seq_{start}_to_{end} WHERE accountName = '{ACCOUNT}' AND containerName = '{container}' "
            f"AND blobName = '{seed}'"
        )


def _measure(server: SqlAzurite, container: str, phase: str, rounds: int) -> dict[str, list[float]]:
    client = server.azurite.service().get_container_client(container)
    small = client.get_blob_client("probe/000")
    payload = b"x" * 1024
    rates: dict[str, list[float]] = {"get": [], "put": [], "list": []}
    for r in range(rounds):
        prefix = f"writes/{phase}-{r}"
        rates["get"].append(_rate(GETS, lambda _i: small.download_blob().readall()))
        rates["put"].append(
            _rate(PUTS, lambda i, p=prefix: client.upload_blob(f"{p}-{i:04d}", payload, overwrite=True))
        )
        rates["list"].append(
            _rate(LISTS, lambda _i: [b.name for b in client.walk_blobs(name_starts_with="probe/", delimiter="/")])
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "azurite_flatness.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="azurite-flatness-") as scratch:
        server = start_sql_azurite(Path(scratch))
        try:
            container = server.azurite.new_container()
            client = server.azurite.service().get_container_client(container)
            names = [f"probe/{i:03d}" for i in range(FOLDER_BLOBS)]
            names += [f"base/{i:04d}" for i in range(1_000 - FOLDER_BLOBS)]
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(lambda name: client.upload_blob(name, b"v" * 64, overwrite=True), names))
            upload_s = time.perf_counter() - started
            _measure(server, container, "warm", 1)  # not counted: Node's JIT and MariaDB's buffer pool warm up
            small = _measure(server, container, "1k", args.rounds)
            before = server.blob_rows()
            started = time.perf_counter()
            _grow_by_copies(server, container, "base/0000", args.blobs - before)
            grow_s = time.perf_counter() - started
            after = server.blob_rows()
            large = _measure(server, container, "200k", args.rounds)
            # The copies are readable blobs, not just rows: one of them read back over REST.
            assert client.get_blob_client("fill/0000123").download_blob().readall() == b"v" * 64
        finally:
            server.stop()
    result: dict[str, object] = {
        "blobs": {"phase_1": before, "phase_2": after},
        "upload_1000_s": round(upload_s, 1),
        "grow_s": round(grow_s, 1),
        "rounds": args.rounds,
    }
    print(f"container: {before:,} blobs, then {after:,} (grown in {grow_s:.1f} s; 1,000 uploaded in {upload_s:.1f} s)")
    print(f"{'operation':<28} {'1k (req/s)':>11} {'200k (req/s)':>13} {'ratio':>6}")
    for op, label in (("get", "GET small blob"), ("put", "PUT 1 KiB"), ("list", "list 100 (prefix+delim)")):
        low, high = statistics.median(small[op]), statistics.median(large[op])
        result[op] = {"rate_1k": round(low, 1), "rate_200k": round(high, 1), "ratio": round(low / high, 2)}
        result[op + "_rounds"] = {"1k": [round(x, 1) for x in small[op]], "200k": [round(x, 1) for x in large[op]]}
        print(f"{label:<28} {low:>11.1f} {high:>13.1f} {low / high:>6.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
