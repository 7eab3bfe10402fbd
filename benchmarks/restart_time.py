"""Benchmark: how long a stateful query takes to restart after 2,000 batches, with and without `checkpoint prune`.

A checkpoint of `--batches` short batches is built once per setup (count per key over `rate-micro-batch`),
or taken from `checkpoint_growth.py --keep DIR`. Then, `--repeats` times and alternating, a fresh copy of it
is restarted as is, and a fresh copy pruned with tidemark's `prune_checkpoint(keep=20, apply=True)` is
restarted (a throwaway restart first warms the JVM, and the order alternates between repeats). Restart time =
from `writeStream.start()` until the first batch after the restart has completed (it loads the latest offsets,
commits and state). Reported: median restart time, the first batch's planning and
state-load-bearing addBatch time, and the checkpoint's file count, as the ratio pruned / unpruned.

Run by hand:  .venv/bin/python benchmarks/restart_time.py --batches 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _stream_bench import folder_stats, markdown_table, session
from checkpoint_growth import SETUPS, start

ROWS, KEYS = 50, 10_000  # all 10k keys are in state after 200 batches


def build(spark: Any, name: str, checkpoint: Path, batches: int) -> None:
    """Run setup `name` for `batches` batches into checkpoint."""
    query = start(spark, name, checkpoint, ROWS, KEYS)
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = query.lastProgress
        if progress is not None and int(progress["batchId"]) + 1 >= batches:
            break
        time.sleep(0.2)
    query.stop()


def restart_once(spark: Any, name: str, checkpoint: Path) -> dict[str, float]:
    """Restart from checkpoint; time until the first new batch completes."""
    started = time.perf_counter()
    query = start(spark, name, checkpoint, ROWS, KEYS)
    first = run_batches_after_restart(query)
    elapsed = time.perf_counter() - started
    durations = first.get("durationMs", {})
    return {
        "restart_s": elapsed,
        "query_planning_ms": float(durations.get("queryPlanning", 0)),
        "add_batch_ms": float(durations.get("addBatch", 0)),
        "latest_offset_ms": float(durations.get("latestOffset", 0)),
    }


def run_batches_after_restart(query: Any, timeout: float = 600) -> dict[str, Any]:
    """The progress of the first batch this run completes (its id continues the checkpoint's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = query.lastProgress
        if progress is not None:
            value: dict[str, Any] = progress
            query.stop()
            return value
        time.sleep(0.01)
    query.stop()
    msg = f"no batch completed within {timeout:.0f}s of the restart"
    raise RuntimeError(msg)


def prune(path: Path, keep: int) -> int:
    """Apply tidemark's prune; return how many files it removed."""
    from tidemark.doctor.prune import prune_checkpoint

    return int(prune_checkpoint(str(path), keep=keep, apply=True).files)


def measure(spark: Any, name: str, base: Path, work: Path, repeats: int, keep: int) -> dict[str, Any]:
    """Alternate restarts of unpruned and pruned copies of base."""
    runs: dict[str, list[dict[str, float]]] = {"unpruned": [], "pruned": []}
    files: dict[str, int] = {}
    removed = 0
    for attempt in range(repeats):
        # Alternate which variant goes first, so neither always restarts on a JVM warmed by the other.
        order = ("unpruned", "pruned") if attempt % 2 == 0 else ("pruned", "unpruned")
        for variant in order:
            copy = work / f"{name.replace(' ', '-')}-{variant}-{attempt}"
            shutil.copytree(base, copy)
            if variant == "pruned":
                removed = prune(copy, keep)
            files[variant] = folder_stats(copy)[0]
            runs[variant].append(restart_once(spark, name, copy))
            shutil.rmtree(copy, ignore_errors=True)
    summary: dict[str, Any] = {"setup": name, "files": files, "pruned_files_removed": removed}
    for variant, values in runs.items():
        summary[variant] = {k: statistics.median(v[k] for v in values) for k in values[0]}
        summary[variant]["all_restart_s"] = [round(v["restart_s"], 2) for v in values]
    return summary


def render(results: list[dict[str, Any]], batches: int) -> str:
    """Markdown: restart time and its parts, unpruned vs pruned, with the ratio."""
    rows = []
    for r in results:
        u, p = r["unpruned"], r["pruned"]
        rows.append(
            [
                r["setup"],
                f"{r['files']['unpruned']} -> {r['files']['pruned']}",
                f"{u['restart_s']:.2f} {u['all_restart_s']}",
                f"{p['restart_s']:.2f} {p['all_restart_s']}",
                f"{p['restart_s'] / u['restart_s']:.2f}x",
                f"{u['add_batch_ms']:.0f} / {p['add_batch_ms']:.0f}",
                f"{u['query_planning_ms']:.0f} / {p['query_planning_ms']:.0f}",
            ]
        )
    header = [
        f"setup ({batches} batches)",
        "checkpoint files unpruned -> pruned",
        "restart s unpruned (median [runs])",
        "restart s pruned",
        "pruned / unpruned",
        "first addBatch ms u / p",
        "queryPlanning ms u / p",
    ]
    return markdown_table(header, rows)


def main() -> None:
    """Parse arguments, build (or reuse) checkpoints, measure restarts, print markdown."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=int, default=20, help="batches of history prune keeps")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated: " + ", ".join(SETUPS))
    parser.add_argument("--from", dest="source", type=Path, default=None, help="checkpoints kept by checkpoint_growth")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    spark = session(shuffle_partitions=2, driver_memory="2g")
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-restart-"))
    results = []
    try:
        for name in args.setups.split(","):
            base = (args.source or work) / name.replace(" ", "-")
            if args.source is None:
                started = time.monotonic()
                build(spark, name, base, args.batches)
                print(f"built {name}: {time.monotonic() - started:.0f}s", file=sys.stderr)
            if not results:
                # A throwaway restart first: the JVM's first query pays for class loading and JIT.
                warmup = work / "warmup"
                shutil.copytree(base, warmup)
                restart_once(spark, name, warmup)
                shutil.rmtree(warmup, ignore_errors=True)
            result = measure(spark, name, base, work, args.repeats, args.keep)
            print(json.dumps(result), file=sys.stderr, flush=True)
            results.append(result)
    finally:
        # Stop first: state store maintenance threads may still write into the folder.
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(render(results, args.batches))


if __name__ == "__main__":
    main()
