"""Spark Connect against a local session: the same pipeline, data and settings, in fresh processes, interleaved.

Run by hand: `.venv/bin/python benchmarks/connect_pipeline.py [--events 400000] [--files 20] [--rounds 5]`.

Each round runs `tidemark run CONFIG --available-now` twice on the same generated files, each with a new
checkpoint and output, in the order A B or B A (alternating):
- A (connect): a client process with SPARK_REMOTE set, against a Spark Connect server started for this round from
  the pyspark wheel (local[2], the same driver memory), so its JVM is as cold as B's; the server's start is not in
  A's wall time (a user's server is already up), and its first query pays the same JIT warm-up as B's;
- B (local): the same command with no SPARK_REMOTE: tidemark starts its local[2] JVM in the process.

Figures per run: the process's wall seconds, and the query's own seconds (the sum of each batch's
triggerExecution from the progress log) with its rows. The headline ratio is the query throughput A/B (rows per
query second), pair by pair; what Connect adds per batch is the median batch's triggerExecution A minus B. Proof:
A's and B's outputs are compared row for row every round. The raw JSON is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.connect_server import start_connect_server, stop_connect_server  # noqa: E402
from tests.helpers import write_config  # noqa: E402

from tidemark.pipeline.generate import generate_events  # noqa: E402


def _progress(monitor: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for log in sorted(monitor.glob("*.jsonl")) for line in log.read_text().splitlines()]
    return [line["progress"] for line in lines if line["type"] == "progress"]


def _run(work: Path, landing: Path, remote: str | None, files_per_trigger: int) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.symlink(landing, work / "landing")
    config = write_config(
        work,
        spark={"master": "local[2]", "shuffle_partitions": 4, "driver_memory": "2g"},
        source={"max_files_per_trigger": files_per_trigger},
        checkpoint={"location": "checkpoint", "state_store": "rocksdb", "changelog": True},
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    if remote:
        env["SPARK_REMOTE"] = remote
    env["PYSPARK_PYTHON"] = sys.executable
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    batches = _progress(work / "checkpoint-monitor")
    rows = sum(int(b["numInputRows"]) for b in batches)
    trigger_ms = [int(b["durationMs"]["triggerExecution"]) for b in batches]
    return {"wall_s": round(wall, 2), "rows": rows, "query_s": round(sum(trigger_ms) / 1000, 2), "batch_ms": trigger_ms}


def _same_output(a: Path, b: Path) -> bool:
    import pandas as pd

    left, right = (
        pd.read_parquet(p).astype(str).sort_values(["user", "windowStart"]).reset_index(drop=True) for p in (a, b)
    )
    return bool(left.equals(right))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidemark-connect-bench-"))
    landing = root / "landing"
    generate_events(landing, events=args.events, keys=2000, files=args.files, seed=5)
    rounds: list[dict[str, Any]] = []
    try:
        for index in range(args.rounds):
            server, process = start_connect_server(root / f"server-{index}", [], {"spark.driver.memory": "2g"})
            try:
                order = ("connect", "local") if index % 2 == 0 else ("local", "connect")
                result: dict[str, Any] = {}
                for kind in order:
                    remote = server.url if kind == "connect" else None
                    result[kind] = _run(root / kind, landing, remote, args.files_per_trigger)
            finally:
                stop_connect_server(process)
            result["same_output"] = _same_output(root / "connect" / "output", root / "local" / "output")
            a, b = result["connect"], result["local"]
            result["query_throughput_ratio"] = round((a["rows"] / a["query_s"]) / (b["rows"] / b["query_s"]), 3)
            result["wall_ratio"] = round(b["wall_s"] / a["wall_s"], 3)  # throughput over the whole process
            result["batch_ms_added"] = statistics.median(a["batch_ms"]) - statistics.median(b["batch_ms"])
            rounds.append(result)
            print(json.dumps({k: v for k, v in result.items() if k not in ("connect", "local")}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def spread(key: str) -> str:
        values = [r[key] for r in rounds]
        return f"min {min(values)} median {statistics.median(values)} max {max(values)}"

    print(f"query throughput connect/local: {spread('query_throughput_ratio')}")
    print(f"whole-process throughput connect/local: {spread('wall_ratio')}")
    print(f"median batch ms added by Connect: {spread('batch_ms_added')}")
    print(f"outputs equal every round: {all(r['same_output'] for r in rounds)}")
    print(json.dumps({"args": vars(args), "rounds": rounds}))


if __name__ == "__main__":
    main()
