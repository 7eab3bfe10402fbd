"""The Grafana dashboard's model (no Prometheus needed; the integration test runs every query against a real one)."""

from __future__ import annotations

import json
import re

import pytest

from tidemark.cli.main import main
from tidemark.monitor.dashboard import dashboard, dashboard_json, expressions
from tidemark.monitor.metrics import METRIC_NAMES
from tidemark.sizing.advice import COMMIT_SHARE_HIGH


def test_cli_prints_the_dashboard_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metrics", "dashboard", "--title", "Streams", "--uid", "streams", "--window", "1h"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["title"] == "Streams" and printed["uid"] == "streams"
    shares = [e for e in expressions(printed) if "increase(" in e]
    assert shares and all("[1h]" in e and "[15m]" not in e for e in shares)
    assert json.loads(dashboard_json()) == dashboard()
    assert main(["metrics", "dashboard", "--window", "soon"]) == 2


def test_one_row_per_concern_and_variables_for_pipeline_and_run() -> None:
    model = dashboard()
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert rows == [
        "Progress and lag",
        "State size and commit time",
        "RocksDB",
        "Quarantine",
        "Stuck batches",
        "Spark executor memory",
    ]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert list(variables) == ["datasource", "pipeline", "run_id"]
    assert variables["datasource"]["query"] == "prometheus"
    assert "$pipeline" in variables["run_id"]["query"]
    assert all(variables[name]["multi"] and variables[name]["includeAll"] for name in ("pipeline", "run_id"))


def test_every_query_is_filtered_by_the_variables_and_names_known_series() -> None:
    model = dashboard()
    for expr in expressions(model):
        if "metrics_executor_" in expr:
            assert 'application_name=~"tidemark-$pipeline"' in expr
            continue
        for selector in re.findall(r"\{[^}]*\}", expr):
            assert 'pipeline=~"$pipeline"' in selector and 'run_id=~"$run_id"' in selector, expr
        names = set(re.findall(r"\btidemark_[a-z_]+", expr))
        assert names and names <= METRIC_NAMES, names - METRIC_NAMES
    panels = [p for p in model["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine


def test_commit_share_panel_shows_the_planners_threshold() -> None:
    panel = next(p for p in dashboard()["panels"] if p["title"].startswith("Commit share"))
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == COMMIT_SHARE_HIGH
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
