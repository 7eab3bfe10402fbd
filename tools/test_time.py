"""Where `make test`'s default run spent its time, by test module: the per-issue shares of the CI budget.

    python3 tools/test_time.py [build/junit-default.xml] [--workers 2] [--match iceberg]

Reads the JUnit XML that `make test`'s default pytest run writes (every test's seconds, setup and teardown
included) and prints each module's summed seconds and its share of the run's wall time: summed seconds divided by
the xdist workers (both workers are busy to the end: a module's tests run on one worker, modules spread over both).
--match keeps the modules whose path contains the text (case-insensitive). Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_seconds(report: Path) -> dict[str, float]:
    """Module path -> summed seconds of its test cases."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - our own test run's report
        module = case.get("classname", "").split("::")[0].replace(".", "/")
        # classname is tests.integration.test_x (module) or tests.integration.test_x.TestClass
        parts = module.split("/")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        seconds["/".join(parts) + ".py" if parts else module] += float(case.get("time", 0.0))
    return dict(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", default=str(REPO / "build" / "junit-default.xml"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--match", default="")
    args = parser.parse_args()
    report = Path(args.report)
    if not report.is_file():
        print(f"no JUnit report at {report}: run `make test` first", file=sys.stderr)
        return 1
    seconds = module_seconds(report)
    chosen = {m: s for m, s in seconds.items() if args.match.lower() in m.lower()}
    if not chosen:
        print(f"no module matches {args.match!r} in {report}", file=sys.stderr)
        return 1
    for module, spent in sorted(chosen.items(), key=lambda item: -item[1]):
        print(f"{spent:8.1f} s  {module}")
    total = sum(chosen.values())
    print(
        f"{total:8.1f} s  summed; {total / args.workers / 60:.1f} min of the run's wall time on {args.workers} workers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
