"""The fault matrix of docs/reliability.md, rendered from what the test run proved and checked against it.

    python3 tools/reliability.py            # docs/reliability.md against build/reliability/*.json; exit 1 on a mismatch
    python3 tools/reliability.py --write    # render the table from build/reliability/*.json into docs/reliability.md

The matrix (MATRIX below) is every cell issue 58 asks for: a fault, a store, a sink, on a Spark line. A cell either
must be proved by a test marked `@pytest.mark.reliability(fault=..., storage=..., sink=...)` that passed in this
run on that line (tests/reliability.py writes the outcomes: `make test`'s default run and each smoke lane), or
carries the one line that says why it cannot run. The check fails when a cell the matrix expects has no passing
result, a marked test failed, was skipped or only refused, a test proved a cell that has a why or names a cell the
matrix does not have, or the table in the doc differs from what these results render. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reliability.md"
RESULTS = REPO / "build" / "reliability"
BEGIN, END = "<!-- reliability:begin -->", "<!-- reliability:end -->"
LINES = ("4.1", "4.2")
LOCAL, WASBS, ABFS, S3 = "local", "azure wasbs", "azure abfs", "s3 (moto)"
STORAGES = (LOCAL, WASBS, ABFS, S3)
SINKS = ("parquet", "delta")
KILL, LOST = "driver kill", "checkpoint lost + recover"
OUTAGE, ERRORS = "storage unreachable 30 s", "10% 503s"
PHASES = ("fetch", "rewrite", "verify", "upload", "swap")
NO_WASB = "no wasbs on Spark 4.2: Hadoop 3.5 has no WASB driver (use abfs)"
NOT_IN_MATRIX = "-"


@dataclass(frozen=True)
class Cell:
    """One row of the matrix: a fault on a store and a sink; per Spark line, None (must be proved) or why not."""

    fault: str
    storage: str
    sink: str
    lines: dict[str, str | None]  # line -> None (a test must prove it) or the one line why it cannot run

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.fault, self.storage, self.sink)


def _why_not_on_42(storage: str) -> str | None:
    """Why a kill or lost-checkpoint cell cannot run on Spark 4.2, or None when the 4.2 lane must prove it."""
    return NO_WASB if storage == WASBS else None


def _matrix() -> list[Cell]:
    cells = []
    # A driver kill and a lost checkpoint, on every store and sink, on Spark 4.1 and 4.2 where the scheme exists.
    for fault in (KILL, LOST):
        for storage in STORAGES:
            for sink in SINKS:
                lines: dict[str, str | None] = {"4.1": None, "4.2": _why_not_on_42(storage)}
                cells.append(Cell(fault, storage, sink, lines))
    # The store misbehaving (through the tests' fault proxy), on Spark 4.1.
    for fault in (OUTAGE, ERRORS):
        for storage in (WASBS, S3):
            for sink in SINKS:
                cells.append(Cell(fault, storage, sink, {"4.1": None}))
    # `state repartition` killed in each phase where checkpoints live remotely, on Spark 4.1.
    for phase in PHASES:
        for storage in (ABFS, S3):
            cells.append(Cell(f"repartition killed at {phase}", storage, "-", {"4.1": None}))
    return cells


MATRIX = _matrix()


@dataclass(frozen=True)
class Result:
    """One marked test's outcome for one cell, on one Spark line."""

    line: str
    test: str
    fault: str
    storage: str
    sink: str
    outcome: str  # passed | failed | skipped | refused

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.fault, self.storage, self.sink)


def spark_line(version: str) -> str:
    """'4.1.1' -> '4.1'."""
    return ".".join(version.split(".")[:2])


def load_results(folder: Path) -> list[Result]:
    """Every outcome in folder's result files (one per run, per pytest-xdist worker)."""
    found = []
    for path in sorted(folder.glob("*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        line = spark_line(body["spark"])
        for entry in body["results"]:
            found.append(Result(line, entry["test"], entry["fault"], entry["storage"], entry["sink"], entry["outcome"]))
    return found


def verdict(cell: Cell, line: str, results: list[Result]) -> str:
    """What the table says for one cell on one line."""
    if line not in cell.lines:
        return NOT_IN_MATRIX
    why = cell.lines[line]
    if why is not None:
        return f"no: {why}"
    mine = [r for r in results if r.key == cell.key and r.line == line]
    if any(r.outcome != "passed" for r in mine):
        return "FAILED"
    return "yes" if mine else "missing"


def render(results: list[Result]) -> str:
    """The table between the markers: one row per cell, a column per Spark line, and the tests that proved it."""
    header = ["fault", "storage", "sink", *(f"Spark {line}" for line in LINES), "proved by"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in MATRIX:
        proofs = sorted({r.test for r in results if r.key == cell.key and r.outcome == "passed" and r.line in LINES})
        by = "<br>".join(f"`{test}`" for test in proofs) or NOT_IN_MATRIX
        verdicts = [verdict(cell, line, results) for line in LINES]
        rows.append("| " + " | ".join([cell.fault, cell.storage, cell.sink, *verdicts, by]) + " |")
    return "\n".join(rows) + "\n"


def table_of(doc: str) -> str:
    """The text between the markers."""
    if BEGIN not in doc or END not in doc:
        msg = f"the doc has no fault matrix between {BEGIN} and {END}"
        raise ValueError(msg)
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def with_table(doc: str, table: str) -> str:
    """The doc with its table replaced."""
    head, rest = doc.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}{END}{rest.split(END, 1)[1]}"


def compare(doc: str, results: list[Result]) -> list[str]:
    """Every reason the doc and this run's results disagree (empty when they agree)."""
    problems = []
    known = {cell.key: cell for cell in MATRIX}
    claimed = _claims(table_of(doc))
    for result in results:
        if result.line not in LINES:
            continue  # a smoke lane of a line the matrix does not cover (its own tests fail it when they fail)
        label = f"{' / '.join(result.key)} on Spark {result.line}: {result.test}"
        cell = known.get(result.key)
        if cell is None:
            problems.append(f"{label} names a cell the matrix does not have (tools/reliability.py MATRIX)")
        elif result.outcome != "passed":
            problems.append(f"{label} {result.outcome}: it proves nothing")
        elif result.line in cell.lines and cell.lines[result.line] is not None:
            problems.append(f"{label} passed, but the matrix says it cannot run: {cell.lines[result.line]}")
    for cell in MATRIX:
        for line in LINES:
            if line not in cell.lines or cell.lines[line] is not None:
                continue
            passed = [r for r in results if r.key == cell.key and r.line == line and r.outcome == "passed"]
            if passed:
                continue
            label = f"{' / '.join(cell.key)} on Spark {line}"
            if claimed.get((*cell.key, line)) == "yes":
                problems.append(f"{label}: the doc says yes, but no test proved it in this run")
            else:
                problems.append(f"{label}: no test proved it in this run and the matrix gives no reason why")
    if not problems and table_of(doc) != render(results):
        problems.append(
            "the table in the doc differs from what this run renders: `python3 tools/reliability.py --write`"
        )
    return problems


def _claims(table: str) -> dict[tuple[str, str, str, str], str]:
    """(fault, storage, sink, line) -> what the doc's table says."""
    claims = {}
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines() if line.strip()]
    if len(rows) < 2:
        return claims
    lines = [h.removeprefix("Spark ").strip() for h in rows[0][3:-1]]
    for row in rows[2:]:
        for line, value in zip(lines, row[3:-1], strict=False):
            claims[(row[0], row[1], row[2], line)] = value
    return claims


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="render the table into the doc instead of checking it")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = load_results(args.results)
    if not results:
        sys.exit(f"no fault-matrix results in {args.results}: run `make test` first")
    doc = args.doc.read_text(encoding="utf-8")
    if args.write:
        args.doc.write_text(with_table(doc, render(results)), encoding="utf-8")
        print(f"wrote the fault matrix of {len(MATRIX)} cells into {args.doc}")
        return
    problems = compare(doc, results)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        sys.exit(f"the fault matrix in {args.doc.name} does not match this run ({len(problems)} differences)")
    print(f"fault matrix matches this run: {len(MATRIX)} cells, {len(results)} results")


if __name__ == "__main__":
    main()
