"""The fault matrix's bookkeeping: what each test marked `@pytest.mark.reliability(...)` proved, on which Spark.

A test (or one parametrized case, through `pytest.param(..., marks=...)`) names each cell of the fault matrix it
proves: `@pytest.mark.reliability(fault="driver kill", storage="s3 (moto)", sink="parquet")`; a test may carry
several. Its outcome is recorded per cell with the running Spark: passed, failed, skipped (a skip proves nothing),
or refused (a smoke test that proved only that this Spark lacks the feature: tests/smoke/conftest.py's `refused`).
With TIDEMARK_RELIABILITY_RESULTS set (`make test`, tools/spark_lines/smoke.py), the outcomes are written there as
JSON; under pytest-xdist each worker writes its own file beside it (`<name>.<worker>.json`), so none overwrites
another's. tools/reliability.py renders docs/reliability.md from these files and checks it against them.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Generator
from pathlib import Path

import pytest

FIELDS = ("fault", "storage", "sink")
PASSED, FAILED, SKIPPED, REFUSED = "passed", "failed", "skipped", "refused"
# (nodeid, fault, storage, sink) -> outcome
_outcomes: dict[tuple[str, str, str, str], str] = {}


def cells(item: pytest.Item) -> list[tuple[str, str, str]]:
    """The (fault, storage, sink) cells an item's reliability marks name."""
    found = []
    for marker in item.iter_markers("reliability"):
        missing = [name for name in FIELDS if not marker.kwargs.get(name)]
        if missing or marker.args:
            msg = f"{item.nodeid}: @pytest.mark.reliability takes fault=, storage= and sink= (missing {missing})"
            raise pytest.UsageError(msg)
        found.append((str(marker.kwargs["fault"]), str(marker.kwargs["storage"]), str(marker.kwargs["sink"])))
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    marked = cells(item)
    if not marked or (report.when == "teardown" and report.passed):
        return
    if report.failed:
        result = FAILED
    elif report.skipped:
        result = SKIPPED
    elif report.when == "call":
        result = REFUSED if any(name == "refused" for name, _ in item.user_properties) else PASSED
    else:
        return
    for cell in marked:
        key = (item.nodeid, *cell)
        if _outcomes.get(key) in (FAILED, SKIPPED):  # a failed teardown after a passed call stays failed
            continue
        _outcomes[key] = result


def results_file(target: str) -> Path:
    """Where this process writes: the file named, or under pytest-xdist the worker's own file beside it."""
    path = Path(target)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return path.with_name(f"{path.stem}.{worker}{path.suffix}") if worker else path


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("TIDEMARK_RELIABILITY_RESULTS")
    if not target or not _outcomes:
        return
    import pyspark

    body = {
        "spark": pyspark.__version__,
        "python": platform.python_version(),
        "results": [
            {"test": nodeid, "fault": fault, "storage": storage, "sink": sink, "outcome": result}
            for (nodeid, fault, storage, sink), result in sorted(_outcomes.items())
        ],
    }
    path = results_file(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
