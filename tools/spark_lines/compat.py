"""Keep the README's compatibility table honest: compare it with what the smoke runs proved.

    python3 tools/spark_lines/compat.py                  # README.md against build/smoke/*.json; exit 1 on a mismatch

The table (between the `<!-- compat:begin -->` and `<!-- compat:end -->` markers in README.md) has one row per
smoke target (Spark release, Python) and one column per smoke feature. A cell says `yes` (the smoke test proved it
works), `no (Spark X+)` (the smoke test proved tidemark refuses it in one line naming Spark X), or `-` (that
target's smoke run leaves the feature out: tools/spark_lines/smoke.py JVM_ONLY; a `-` on a feature the run proved
is a mismatch too). Every row must
match a smoke result file written by this run (tools/spark_lines/smoke.py, and the default run of `make test`),
every result file must have its row, and every feature a smoke test proved must have its column: a claim nobody
proved, or a proof the table does not state, is a mismatch. Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- compat:begin -->", "<!-- compat:end -->"
NOT_RUN = "-"
REFUSAL = re.compile(r"needs Spark (\d+\.\d+) or newer")


def parse_table(readme: str) -> tuple[list[str], dict[tuple[str, str], dict[str, str]]]:
    """The features (columns after Spark and Python) and each (spark, python) row's cells."""
    if BEGIN not in readme or END not in readme:
        msg = f"README has no compatibility table between {BEGIN} and {END}"
        raise ValueError(msg)
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in block.splitlines()
        if line.strip().startswith("|")
    ]
    header, body = rows[0], [r for r in rows[2:]]
    if [h.lower() for h in header[:2]] != ["spark", "python"]:
        msg = f"the compatibility table must start with the columns Spark and Python, not {header[:2]}"
        raise ValueError(msg)
    features = header[2:]
    table = {}
    for row in body:
        spark = row[0].split()[0]
        table[(spark, row[1])] = dict(zip(features, row[2:], strict=True))
    return features, table


def expected_cell(result: dict[str, str]) -> str:
    """What the table must say for one smoke outcome."""
    if result["outcome"] == "works":
        return "yes"
    if result["outcome"] == "refused":
        found = REFUSAL.search(result.get("message", ""))
        return f"no (Spark {found.group(1)}+)" if found else "no"
    return "FAILED"


def load_results(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    """Each smoke result file's (spark, python) and the cell its features call for."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        python = ".".join(body["python"].split(".")[:2])
        found[(body["spark"], python)] = {name: expected_cell(r) for name, r in body["features"].items()}
    return found


def compare(readme: str, results: dict[tuple[str, str], dict[str, str]]) -> list[str]:
    """Every difference between the README's table and the smoke results (empty when they agree)."""
    features, table = parse_table(readme)
    problems = []
    for key in sorted(set(table) | set(results)):
        label = f"Spark {key[0]} on Python {key[1]}"
        if key not in results:
            problems.append(f"{label}: the table has a row, but no smoke run proved it")
            continue
        if key not in table:
            problems.append(f"{label}: a smoke run proved it, but the table has no row for it")
            continue
        proved, claimed = results[key], table[key]
        for feature in sorted(set(proved) | set(features)):
            if feature not in features:
                problems.append(f"{label}: the smoke run proved {feature!r}, but the table has no column for it")
            elif feature not in proved and claimed[feature] == NOT_RUN:
                continue
            elif feature not in proved:
                problems.append(f"{label}: the table claims {feature} = {claimed[feature]!r}, no smoke test proved it")
            elif proved[feature] != claimed[feature]:
                problems.append(
                    f"{label}: the table says {feature} = {claimed[feature]!r}, the smoke run: {proved[feature]!r}"
                )
    return problems


def main() -> None:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "README.md"
    folder = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "build" / "smoke"
    results = load_results(folder)
    if not results:
        sys.exit(f"no smoke results in {folder}: run `make test` (or tools/spark_lines/smoke.py run) first")
    problems = compare(readme.read_text(encoding="utf-8"), results)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        sys.exit(
            f"the compatibility table in {readme.name} does not match the smoke runs ({len(problems)} differences)"
        )
    print(f"compatibility table matches {len(results)} smoke runs")


if __name__ == "__main__":
    main()
