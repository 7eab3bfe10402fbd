"""A journaled folder move on Azure Blob (Azurite) behind a latency proxy: seconds and requests a moved file.

The swap of `state repartition --apply` moves the old checkpoint into the archive and the new one into its place,
each a folder move of an object store (no folder rename: a copy and a delete a file, storage/journal.py). This
times one such move of N blobs at a given round-trip latency and counts its requests by kind at the proxy.

A/B across two trees: the tidemark imported is the one on PYTHONPATH, e.g.

    git worktree add /tmp/old <commit>
    PYTHONPATH=/tmp/old/src .venv/bin/python benchmarks/folder_move.py --files 3000 --json old.json
    .venv/bin/python benchmarks/folder_move.py --files 3000 --json new.json

Azurite runs in memory on a free port, started here; the blobs are written straight to it (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fault_proxy import FaultProxy
from tests.servers import ACCOUNT, AZURITE_BIN, _stop, _wait_for_port, azurite_account_key, free_port


def connection(port: int) -> str:
    key = azurite_account_key()
    return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write the result here too")
    args = parser.parse_args()

    from azure.storage.blob import BlobServiceClient

    import tidemark

    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        command = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--disableTelemetry"]
        command += ["--skipApiVersionCheck", "--inMemoryPersistence"]
        log = Path(work) / "azurite.log"
        with log.open("wb") as out:
            azurite = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        proxy = FaultProxy(0, port, latency=args.latency_ms / 1000)
        try:
            _wait_for_port(port, azurite, "azurite", log)
            proxy.start()
            container = BlobServiceClient.from_connection_string(connection(port)).create_container("bench")
            names = [f"ck/state/0/{i % 200}/{i}.delta" for i in range(args.files)]
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda name: container.upload_blob(name, b"d" * 64), names))
            os.environ["AZURE_STORAGE_CONNECTION_STRING"] = connection(proxy.port)
            from tidemark.storage import parse_location
            from tidemark.storage.journal import Step, journaled

            root = f"wasbs://bench@{ACCOUNT}.blob.core.windows.net/ck"
            proxy.reset_counts()
            started = time.monotonic()
            result = journaled(
                parse_location(root).join("_tidemark/journal"),
                {"checkpoint": root},
                [Step(("checkpoint", "state"), ("checkpoint", "archive/state"))],
                "benchmark",
            )
            seconds = time.monotonic() - started
            counts = Counter(proxy.counts)
            left = sum(1 for _ in container.list_blobs(name_starts_with="ck/state/"))
            moved = sum(1 for _ in container.list_blobs(name_starts_with="ck/archive/state/"))
        finally:
            proxy.stop()
            _stop(azurite)
    assert result is not None and left == 0 and moved == args.files, (left, moved)
    requests = sum(counts.values())
    out = {
        "tidemark": str(Path(tidemark.__file__).parent),
        "files": args.files,
        "latency_ms": args.latency_ms,
        "seconds": round(seconds, 2),
        "files_per_second": round(args.files / seconds, 1),
        "requests": dict(counts),
        "requests_per_file": round(requests / args.files, 2),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
