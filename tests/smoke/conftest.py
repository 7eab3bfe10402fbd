"""The smoke subset's bookkeeping: what each smoke test proved, written where the smoke runner asks.

Each smoke test names the feature it proves (`@pytest.mark.smoke("pipeline")`). A passing test proved the feature
works on this Spark and Python, unless it called `refused(message)`: then it proved that tidemark refuses the
feature in one line naming the Spark that has it (the installed Spark lacks it). A failing test proved nothing.
With TIDEMARK_SMOKE_RESULTS set (tools/spark_lines/smoke.py sets it), the outcomes are written there as JSON, which
tools/spark_lines/compat.py compares with the README's compatibility table.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Generator
from pathlib import Path

import pytest

WORKS = "works"
REFUSED = "refused"
FAILED = "failed"
_refusals: dict[str, str] = {}
_outcomes: dict[str, str] = {}


def _feature(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("smoke")
    if marker is None or not marker.args:
        return None
    return str(marker.args[0])


@pytest.fixture
def refused(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record that the installed Spark lacks the test's feature and tidemark said so in `message`."""
    feature = _feature(request.node)
    assert feature is not None, "refused() is for tests marked @pytest.mark.smoke(<feature>)"

    def record(message: str) -> None:
        assert "\n" not in message.strip(), f"not one line: {message!r}"
        _refusals[feature] = message.strip()
        request.node.user_properties.append(("refused", message.strip()))  # the fault matrix: not a pass

    return record


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the features TIDEMARK_SMOKE_LEAVE_OUT names (a comma list): deselected, never run, never claimed."""
    leave_out = {f.strip() for f in os.environ.get("TIDEMARK_SMOKE_LEAVE_OUT", "").split(",") if f.strip()}
    if not leave_out:
        return
    kept = [item for item in items if _feature(item) not in leave_out]
    config.hook.pytest_deselected(items=[item for item in items if _feature(item) in leave_out])
    items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    feature = _feature(item)
    if feature is None or (report.when == "teardown" and report.passed):
        return
    if report.failed or report.skipped:
        _outcomes[feature] = FAILED
    elif report.when == "call" and _outcomes.get(feature) != FAILED:
        _outcomes[feature] = REFUSED if feature in _refusals else WORKS


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("TIDEMARK_SMOKE_RESULTS")
    # Under pytest-xdist each worker ends its own session: only the one that ran smoke tests writes the results.
    if not target or (not _outcomes and os.environ.get("PYTEST_XDIST_WORKER")):
        return
    import pyspark

    body = {
        "target": os.environ.get("TIDEMARK_SMOKE_TARGET", ""),
        "spark": pyspark.__version__,
        "python": platform.python_version(),
        "features": {
            name: {"outcome": outcome, **({"message": _refusals[name]} if name in _refusals else {})}
            for name, outcome in sorted(_outcomes.items())
        },
    }
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
