"""`tidemark analyze` and `tidemark report` on a week-long progress log (300,000 batches), against baselines.

Run by hand (never by pytest):

    .venv/bin/python benchmarks/long_log.py                      # 300,000 batches, 5 rounds
    .venv/bin/python benchmarks/long_log.py --batches 30000 --rounds 3

It writes a synthetic log: every progress line is a recorded RocksDB + changelog batch (custom metrics,
sources, sink, event time) with its figures varied per batch, a 2-second trigger, one 10x spike. Then, in
interleaved rounds (each round runs every command once, the order reversed every other round, after one
warm-up round that is not counted), it times whole processes and takes their peak RSS from GNU time:

- analyze: this checkout vs the implementation before streaming analysis (`--baseline-rev`, exported with
  git archive) on the same log; and vs a floor: a Python loop that only parses every line with `json.loads`.
- report: this checkout on the long log; the baseline's and this checkout's report on a 4-hour log (7,200
  batches), the longest run the old report handled comfortably.
- render: headless Chromium (`--screenshot`, 1200x4000 window, so all charts are painted) of this checkout's
  long report, of the baseline's 4-hour report, and of an empty page (the browser's own start-up and exit).

Ratios are computed per round and reported as median [min-max] over the rounds.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.progress_logs import recorded_progress, write_long_log  # noqa: E402

BASELINE_REV = "8dfafde"  # main before streaming analysis and downsampled reports
FOUR_HOURS = 7_200  # batches of a 4-hour run at 2-second triggers
GNU_TIME = "/usr/bin/time"  # Debian package "time"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,4000",
]


@dataclass(frozen=True)
class Job:
    """One command to time; `output` is a file whose size is reported."""

    name: str
    command: list[str]
    output: Path | None = None


@dataclass
class Result:
    """A job's figures, one per counted round."""

    wall: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    size_mb: float | None = None


def run_once(job: Job, scratch: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of the job's process.

    The peak RSS comes from GNU time, a small C program that forks the command: a child forked from this
    Python process would report at least this process's own RSS (Linux keeps the high-water mark across exec).
    """
    rss_file = scratch / "rss"
    with (scratch / "stdout").open("wb") as out, (scratch / "stderr").open("wb") as err:
        start = time.perf_counter()
        done = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(rss_file), *job.command], stdout=out, stderr=err)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (scratch / "stderr").read_text(errors="replace")[-2000:]
        raise SystemExit(f"{job.name} exited with {done.returncode}: {tail}")
    return wall, int(rss_file.read_text().split()[-1]) / 1024


def tidemark_command(src: Path | None, *args: str) -> list[str]:
    """Run tidemark's CLI from this checkout (src None) or from an exported source tree."""
    if src is None:
        return [str(Path(sys.executable).parent / "tidemark"), *args]
    code = f"import sys; sys.path.insert(0, {str(src)!r}); from tidemark.cli.main import _entry; _entry()"
    return [sys.executable, "-c", code, *args]


def export_baseline(rev: str, target: Path) -> Path:
    """The baseline's src/ tree, exported from git (no build needed: analyze and report are pure Python)."""
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def chromium_command(profile: Path, page: Path, shot: Path) -> list[str]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("chromium is needed for the render figures (make chromium)")
    return [found, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", f"file://{page}"]


def jobs_for(work: Path, baseline: Path, long_log: Path, short_log: Path) -> list[Job]:
    """The commands, by short name: this checkout's, the baseline's, and the floors."""
    floor = "import json, sys\nfor line in open(sys.argv[1], encoding='utf-8'): json.loads(line)"
    blank = work / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>\n")
    new_long, old_short, new_short = work / "new-long.html", work / "old-4h.html", work / "new-4h.html"
    long, short = str(long_log), str(short_log)
    profile = work / "chrome"
    return [
        Job("analyze", tidemark_command(None, "analyze", long, "--json")),
        Job("analyze-baseline", tidemark_command(baseline, "analyze", long, "--json")),
        Job("json-floor", [sys.executable, "-c", floor, long]),
        Job("report", tidemark_command(None, "report", long, "-o", str(new_long)), new_long),
        Job("report-4h", tidemark_command(None, "report", short, "-o", str(new_short)), new_short),
        Job("report-4h-baseline", tidemark_command(baseline, "report", short, "-o", str(old_short)), old_short),
        Job("render", chromium_command(profile, new_long, work / "shot-new.png")),
        Job("render-4h-baseline", chromium_command(profile, old_short, work / "shot-old.png")),
        Job("render-empty", chromium_command(profile, blank, work / "shot-blank.png")),
    ]


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def ratio(results: dict[str, Result], a: str, b: str, figure: str = "wall") -> str:
    pairs = [x / y for x, y in zip(getattr(results[a], figure), getattr(results[b], figure), strict=True)]
    return spread(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the logs and reports here")
    args = parser.parse_args()
    if not Path(GNU_TIME).exists():
        raise SystemExit(f"{GNU_TIME} is needed for peak RSS (apt-get install time)")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="tm-long-log-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        template = recorded_progress()
        long_log = write_long_log(work / "long.jsonl", args.batches, args.batches * 2 // 5, progress=template)
        short_log = write_long_log(work / "four-hours.jsonl", FOUR_HOURS, FOUR_HOURS * 2 // 5, progress=template)
        sizes = f"{long_log.size_bytes / 1e6:,.0f} MB and {short_log.size_bytes / 1e6:,.1f} MB"
        print(f"logs of {long_log.batches:,} and {short_log.batches:,} batches ({sizes}) written", flush=True)
        baseline = export_baseline(args.baseline_rev, work / "baseline")
        jobs = jobs_for(work, baseline, long_log.path, short_log.path)
        results = {job.name: Result() for job in jobs}
        for number in range(args.rounds + 1):
            order = jobs if number % 2 == 0 else jobs[::-1]
            label = "warm-up" if number == 0 else f"round {number}"
            for job in order:
                wall, rss = run_once(job, work)
                if number:
                    results[job.name].wall.append(wall)
                    results[job.name].rss_mb.append(rss)
            print(f"{label} done at {time.perf_counter() - started:.0f} s", flush=True)
        for job in jobs:
            if job.output is not None:
                results[job.name].size_mb = job.output.stat().st_size / 1e6
        report(results, args, long_log.batches)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def report(results: dict[str, Result], args: argparse.Namespace, batches: int) -> None:
    """Print the figures as markdown, for BENCHMARKS.md."""
    load = os.getloadavg()[0]
    print(f"\n{batches:,}-batch log, {args.rounds} interleaved rounds, load average {load:.1f} at the end")
    print("\n| command | wall s, median [min-max] | peak RSS MB, median [min-max] | output MB |")
    print("|---|---|---|---|")
    for name, result in results.items():
        size = f"{result.size_mb:.2f}" if result.size_mb is not None else ""
        print(f"| {name} | {spread(result.wall)} | {spread(result.rss_mb)} | {size} |")

    def size(name: str) -> float:
        return results[name].size_mb or math.nan

    print("\nratios per round, median [min-max]:")
    print(f"- analyze / analyze-baseline (same log): wall {ratio(results, 'analyze', 'analyze-baseline')}, ", end="")
    print(f"peak RSS {ratio(results, 'analyze', 'analyze-baseline', 'rss_mb')}")
    print(f"- analyze / json-floor: wall {ratio(results, 'analyze', 'json-floor')}")
    print(f"- report / analyze (long log): wall {ratio(results, 'report', 'analyze')}")
    print(f"- report-4h / report-4h-baseline: wall {ratio(results, 'report-4h', 'report-4h-baseline')}")
    print(f"- size: report / report-4h-baseline {size('report') / size('report-4h-baseline'):.2f}, ", end="")
    print(f"report-4h / report-4h-baseline {size('report-4h') / size('report-4h-baseline'):.2f}")
    print(f"- render / render-empty: {ratio(results, 'render', 'render-empty')}; ", end="")
    print(f"render / render-4h-baseline: {ratio(results, 'render', 'render-4h-baseline')}")
    analyze, render = results["analyze"], results["render"]
    print("\ngoals (absolute figures on this machine):")
    print(f"- analyze wall median {statistics.median(analyze.wall):.2f} s, max {max(analyze.wall):.2f} s (<= 15 s)")
    print(f"- analyze peak RSS max {max(analyze.rss_mb):.0f} MB (<= 300 MB)")
    print(f"- report size {size('report'):.2f} MB (<= 3 MB)")
    print(f"- render, whole browser run: median {statistics.median(render.wall):.2f} s, max {max(render.wall):.2f} s")
    print(f"  (<= 3 s); the empty page alone: median {statistics.median(results['render-empty'].wall):.2f} s")


if __name__ == "__main__":
    main()
