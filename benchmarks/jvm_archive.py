"""JVM starts from a class archive: `tidemark run` of the demo in a fresh process, with and without the tests' AppCDS
archive (tests/jvm_archive.py).

Run by hand. What the test suite's JVMs of their own gain (each kill test, each smoke command starts one):

    .venv/bin/python benchmarks/jvm_archive.py --work DIR [--rounds 6] [--jit quick|default] [--out FILE.json]

Writes (or reuses) this installation's archive, then runs `tidemark init` into a fresh folder and, timed,
`python -m tidemark.cli.main run CONFIG --available-now` in a new process: A without the archive, B with it,
interleaved A B, B A, ... for N pairs after a warm-up pair. Both arms get the same other JVM options
(`--jit quick`: C1 only, as the tests' own JVMs run; `default`: the JVM's default). Each run's output must equal
the first run's (the windows, read with pyarrow), or the benchmark fails. Prints and writes min / median / max of
each arm and of the B/A ratio pair by pair.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.jvm_archive import ensure, submit_options  # noqa: E402

QUICK_JVM = "-XX:TieredStopAtLevel=1"


def _rows(folder: Path) -> list[tuple[Any, ...]]:
    import pyarrow.parquet as pq

    files = sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith((".", "_")))
    tables = [pq.read_table(p) for p in files]
    return sorted(tuple(row.values()) for table in tables for row in table.to_pylist())


def _one(work: Path, name: str, options: str) -> tuple[float, list[tuple[Any, ...]]]:
    demo = work / name
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    subprocess.run([*cli, "init", str(demo)], check=True, capture_output=True)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_SUBMIT_OPTS": options}
    started = time.monotonic()
    done = subprocess.run([*cli, "run", str(demo / "tidemark.toml"), "--available-now"], env=env, capture_output=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{name}: tidemark run exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return seconds, _rows(demo / "output")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--jit", choices=["quick", "default"], default="quick")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    archive = ensure()
    if archive is None:
        sys.exit("no archive: see the line above")
    base = QUICK_JVM if args.jit == "quick" else ""
    arms = {"A": base, "B": f"{base} {submit_options(archive)}".strip()}
    expected: list[tuple[Any, ...]] | None = None
    times: dict[str, list[float]] = {"A": [], "B": []}
    for round_ in range(args.rounds + 1):
        order = ("A", "B") if round_ % 2 == 0 else ("B", "A")
        for arm in order:
            seconds, rows = _one(args.work, f"r{round_}-{arm}", arms[arm])
            if expected is None:
                expected = rows
            elif rows != expected:
                sys.exit(f"round {round_} {arm}: {len(rows)} rows differ from the first run's {len(expected)}")
            if round_ > 0:  # round 0 warms the page cache
                times[arm].append(seconds)
            print(f"round {round_} {arm}: {seconds:.2f} s", flush=True)
    ratios = [b / a for a, b in zip(times["A"], times["B"], strict=True)]

    def spread(values: list[float]) -> dict[str, float]:
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    result = {
        "jit": args.jit,
        "rounds": args.rounds,
        "rows": len(expected or []),
        "archive_mb": round(archive.stat().st_size / 2**20, 1),
        "without": spread(times["A"]),
        "with": spread(times["B"]),
        "ratio_with_over_without": spread(ratios),
        "pairs": [{"without": a, "with": b} for a, b in zip(times["A"], times["B"], strict=True)],
        "load": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
