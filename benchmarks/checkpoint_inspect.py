"""Benchmark: `tidemark checkpoint inspect` on a synthetic 1,000,000-file checkpoint vs `find | awk`.

Run by hand: `.venv/bin/python benchmarks/checkpoint_inspect.py [--files N] [--dir PATH] [--keep]`.
Both commands run on the same warm tree; best of --repeat runs; peak memory of the inspect process.
Also times, in this process, a bare walk with the C listing against the os.scandir fallback (what a machine
without a C compiler gets), and the startup of the CLI on an empty checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

FILES_PER_VERSION = 4  # <v>.delta, .<v>.delta.crc, <v>.delta.crc (Spark 4.1 checksum), .<v>.delta.crc.crc
FIND = "find {path} -type f -printf '%s\\n' | awk '{{s+=$1}} END {{print NR, s}}'"


def delta_file(size: int) -> bytes:
    """A delta of `size` bytes as Spark writes it: one record in a raw lz4-java block, then the end block."""
    key = b"k" * (size - 54)
    records = struct.pack(">i", len(key)) + key + struct.pack(">ii", 0, -1)
    block = b"LZ4Block" + bytes([0x15]) + struct.pack("<iii", len(records), len(records), 0) + records
    return block + b"LZ4Block" + bytes([0x15]) + struct.pack("<iii", 0, 0, 0)


def build(root: Path, files: int, partitions: int = 200) -> None:
    """A checkpoint with one operator, `partitions` partitions and enough versions to reach `files` files."""
    versions = max(1, files // (partitions * FILES_PER_VERSION))
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"bench"}')
    for b in range(versions):
        (root / "offsets" / str(b)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{"spark.sql.shuffle.partitions":"200"}}\n'
            '{"logOffset":0}'
        )
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    for p in range(partitions):
        folder = root / "state" / "0" / str(p)
        folder.mkdir(parents=True)
        for v in range(1, versions + 1):
            for name, size in (
                (f"{v}.delta", 180),
                (f".{v}.delta.crc", 12),
                (f"{v}.delta.crc", 160),
                (f".{v}.delta.crc.crc", 12),
            ):
                if v == versions and name == f"{v}.delta":
                    # The version a restart loads is read and decoded by inspect: a real (raw lz4) delta file.
                    (folder / name).write_bytes(delta_file(size))
                    continue
                fd = os.open(folder / name, os.O_CREAT | os.O_WRONLY, 0o644)
                os.ftruncate(fd, size)  # sparse: sizes without data blocks
                os.close(fd)


def timed(command: list[str] | str, shell: bool = False) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, shell=shell, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command} failed: {done.stderr}")
    return elapsed, done.stdout


def peak_rss_mb(command: list[str]) -> float:
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=False);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, check=True).stdout
    return int(out.strip()) / 1024


def walk_seconds(root: Path, native: bool) -> float:
    """One bare walk of the tree (listing only, no classification) with the C listing or os.scandir."""
    from tidemark.storage.local import LocalFS

    fs = LocalFS(str(root), native=native)
    start = time.perf_counter()
    files = sum(len(listing.files) for listing in fs.walk())
    elapsed = time.perf_counter() - start
    assert files > 0
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--dir", default="/tmp/tidemark-bench-checkpoint")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the tree for another run")
    args = parser.parse_args()
    root = Path(args.dir)
    if not (root / "state").exists():
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        build(root, args.files)
        print(f"built {root} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    tidemark = [str(Path(sys.executable).with_name("tidemark")), "checkpoint", "inspect", str(root), "--json"]
    timed(FIND.format(path=root), shell=True)  # warm the dentry/inode cache for both
    find_times, inspect_times = [], []
    for _ in range(args.repeat):
        seconds, find_out = timed(FIND.format(path=root), shell=True)
        find_times.append(seconds)
        seconds, inspect_out = timed(tidemark)
        inspect_times.append(seconds)
    files, size = (int(x) for x in find_out.split())
    report = json.loads(inspect_out)
    assert (report["files_total"], report["bytes_total"]) == (files, size), "inspect disagrees with find"
    assert report["walker"] == "native", f"inspect listed with {report['walker']}: the C listing is not built"
    rss = peak_rss_mb(tidemark)
    native_walk = min(walk_seconds(root, native=True) for _ in range(args.repeat))
    python_walk = min(walk_seconds(root, native=False) for _ in range(args.repeat))
    empty = root.with_name(root.name + "-empty")
    empty.mkdir(exist_ok=True)
    startup = min(timed([*tidemark[:3], str(empty), "--json"])[0] for _ in range(args.repeat))
    empty.rmdir()
    result = {
        "files": files,
        "bytes": size,
        "find_awk_best_s": round(min(find_times), 3),
        "inspect_best_s": round(min(inspect_times), 3),
        "ratio": round(min(inspect_times) / min(find_times), 2),
        "inspect_peak_rss_mb": round(rss, 1),
        "walk_native_best_s": round(native_walk, 3),
        "walk_python_best_s": round(python_walk, 3),
        "walk_python_over_native": round(python_walk / native_walk, 2),
        "cli_startup_best_s": round(startup, 3),
        "find_times": [round(t, 3) for t in find_times],
        "inspect_times": [round(t, 3) for t in inspect_times],
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
