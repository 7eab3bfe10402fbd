"""A real Prometheus (Debian's package) scrapes a running `tidemark run`, Spark's own servlets and a real
Pushgateway; the series carry what the progress log says, the final state of every way a run ends reaches the
Pushgateway, the dashboard's queries all parse and find data, and the alert rules evaluate on real series."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.prometheus_stack import (
    PrometheusAPI,
    Service,
    binary,
    free_port,
    http_get,
    pushgateway_samples,
    scrape_config,
    start_prometheus,
    start_pushgateway,
    wait_for,
)
from tidemark.config import load_config
from tidemark.formats import read_progress_log
from tidemark.monitor.alerts import AlertThresholds, rules_yaml
from tidemark.monitor.dashboard import dashboard, expressions
from tidemark.monitor.listener import RunMonitor
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.pipeline.run import StopReason, run_pipeline

pytestmark = pytest.mark.integration
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


@dataclass
class Stack:
    """Pushgateway + Prometheus (rules loaded, alerts firing without delay) and the ports they expect."""

    pushgateway: Service
    prometheus: Service
    api: PrometheusAPI
    metrics_port: int
    spark_ui_port: int


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("prometheus")
    pushgateway = start_pushgateway(folder / "pushgateway")
    metrics_port, spark_ui_port = free_port(), free_port()
    rules = folder / "tidemark-rules.yml"
    rules.write_text(rules_yaml(AlertThresholds(pending=timedelta(0))), encoding="utf-8")
    scrapes = [
        scrape_config("tidemark-direct", [f"127.0.0.1:{metrics_port}"]),
        scrape_config("pushgateway", [f"127.0.0.1:{pushgateway.port}"], honor_labels=True),
        scrape_config("spark", [f"127.0.0.1:{spark_ui_port}"], path="/metrics/prometheus"),
        scrape_config("spark-executors", [f"127.0.0.1:{spark_ui_port}"], path="/metrics/executors/prometheus"),
    ]
    try:
        prometheus = start_prometheus(folder / "server", scrapes, rule_files=[str(rules)])
    except BaseException:
        pushgateway.stop()
        raise
    yield Stack(pushgateway, prometheus, PrometheusAPI(prometheus.url), metrics_port, spark_ui_port)
    prometheus.stop()
    pushgateway.stop()


def spark_metrics_conf() -> str:
    """The [spark.conf] block of docs/metrics.md: the lines tested here are the lines users copy."""
    block = re.search(r"```toml\n(\[spark\.conf\]\n.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert block is not None, "docs/metrics.md has no [spark.conf] block"
    return block.group(1)


def _last_progress(log: Path) -> tuple[list[dict[str, Any]], list[str]]:
    events = read_progress_log(str(log))
    return [e.data["progress"] for e in events if e.progress is not None], [e.type for e in events]


@pytest.mark.slow
def test_prometheus_scrapes_a_running_tidemark_run_and_spark(stack: Stack, tmp_path: Path) -> None:
    data = generate_events(tmp_path / "landing", events=450, keys=5, files=3, seed=3, malformed_fraction=0.05)
    lines_written = sum(len(f.read_text().splitlines()) for f in (tmp_path / "landing").iterdir())
    pipeline = "promrun"
    config_path = write_config(
        tmp_path,
        pipeline={"name": pipeline},
        trigger={"mode": "processing-time", "interval": "1 second"},
        # RocksDB (the dashboard has its memory and cache panels) counting rows (and the state rows panel).
        checkpoint={"state_store": "rocksdb", "track_state_rows": True},
        monitor={"metrics_port": stack.metrics_port, "pushgateway": stack.pushgateway.url},
    )
    conf = spark_metrics_conf().replace('"spark.ui.port" = 4040', f'"spark.ui.port" = {stack.spark_ui_port}')
    # Spark reports an idle query every noDataProgressEventInterval (10 s by default): sooner here, to see one.
    conf += '"spark.sql.streaming.noDataProgressEventInterval" = "1s"\n'
    config_path.write_text(config_path.read_text() + "\n" + conf)
    config = load_config(config_path)
    assert config.spark_conf()["spark.ui.enabled"] == "true"

    proc = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "run", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        monitor_dir = Path(config.monitor_dir)
        log = wait_for(lambda: next(monitor_dir.glob("*.jsonl"), None), 180, "the run's progress log")
        run_id = log.stem

        # All input processed and the query idle: the last progress line is the last batch of the run.
        def settled() -> bool:
            progress, kinds = _last_progress(log)
            return sum(p["numInputRows"] for p in progress) == lines_written and kinds[-1] == "idle"

        wait_for(settled, 120, "every input line to be processed and the query to go idle", every=0.5)
        progress, kinds = _last_progress(log)
        last = progress[-1]
        api = stack.api
        sel = f'pipeline="{pipeline}", run_id="{run_id}", job="tidemark-direct"'
        wait_for(lambda: api.value(f"tidemark_batch_id{{{sel}}}") == last["batchId"], 30, "Prometheus's last batch")

        # batch, input rate, state rows, commit time, watermark lag, quarantine, stuck: as the log says
        assert api.value(f'tidemark_run_state{{{sel}, state="running"}}') == 1
        assert api.value(f"tidemark_batches_total{{{sel}}}") == len(progress)
        assert api.value(f"tidemark_input_rows_total{{{sel}}}") == lines_written == data.events + data.malformed_lines
        assert api.value(f"tidemark_input_rows_per_second{{{sel}}}") == pytest.approx(last["inputRowsPerSecond"])
        operator = last["stateOperators"][0]
        op_sel = f'{sel}, operator="{operator["operatorName"]}", operator_id="0"'
        assert api.value(f"tidemark_state_rows{{{op_sel}}}") == operator["numRowsTotal"] > 0
        assert api.value(f"tidemark_state_commit_seconds{{{op_sel}}}") == pytest.approx(operator["commitTimeMs"] / 1000)
        started = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00"))
        watermark = datetime.fromisoformat(last["eventTime"]["watermark"].replace("Z", "+00:00"))
        lag = api.value(f"tidemark_watermark_lag_seconds{{{sel}}}")
        assert lag == pytest.approx((started - watermark).total_seconds())
        quarantined = len(read_quarantine(config.quarantine.path))
        assert api.value(f"tidemark_quarantined_records_total{{{sel}}}") == quarantined == data.malformed_lines
        assert "stuck" not in kinds and api.value(f"tidemark_stuck{{{sel}}}") == 0
        idle_line = next(e.time for e in reversed(read_progress_log(str(log))) if e.type == "idle").timestamp()
        idle_seen = wait_for(
            lambda: api.value(f"tidemark_last_idle_timestamp_seconds{{{sel}}}"), 10, "the idle report in Prometheus"
        )
        assert idle_line - 1 <= idle_seen <= time.time()  # the log's line and the gauge come from the same event

        # Spark's own streaming metrics (PrometheusServlet, the docs' [spark.conf] lines) say the same
        spark_prefix = f"metrics_tidemark_driver_spark_streaming_{pipeline}"
        assert api.value(f"{spark_prefix}_states_rowsTotal_Value") == sum(
            op["numRowsTotal"] for op in last["stateOperators"]
        )
        assert api.value(f"{spark_prefix}_inputRate_total_Value") == pytest.approx(last["inputRowsPerSecond"])
        # Executor memory figures are peaks that Spark updates on each executor heartbeat (every 10 s): they read
        # 0 until the first one has been scraped, so wait for it rather than catch the first scrape.
        heap_query = f'metrics_executor_JVMHeapMemory_bytes{{application_name="tidemark-{pipeline}"}}'
        heap = wait_for(lambda: (api.value(heap_query) or 0) > 0 and api.value(heap_query), 60, "the executor heap")
        assert heap > 0

        # the same figures through the Pushgateway (honor_labels keeps job="tidemark")
        pushed = f'pipeline="{pipeline}", run_id="{run_id}", job="tidemark"'
        wait_for(lambda: api.value(f"tidemark_batch_id{{{pushed}}}") == last["batchId"], 30, "the pushed batch")

        # the exposition passes promtool's lint
        text = http_get(f"http://127.0.0.1:{stack.metrics_port}/metrics")
        checked = subprocess.run(
            [binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr

        # every dashboard query parses (Prometheus answers an error otherwise) and finds data of this run
        _check_dashboard(api, pipeline, run_id)

        # The rules evaluate without error on real series. 5 % malformed input is above the 1 % quarantine limit,
        # and the generated events' time (from 2026-01-01) trails the wall clock by more than the 1 h lag limit.
        rules = json.loads(http_get(f"{stack.prometheus.url}/api/v1/rules"))["data"]["groups"][0]["rules"]
        # Seven rules (the RocksDB crawl rule among them); each evaluates without error.
        assert len(rules) == 7 and all(rule["health"] == "ok" for rule in rules), rules
        expected = {"TidemarkQuarantineShareHigh"} | ({"TidemarkWatermarkLagHigh"} if lag > 3600 else set())
        wait_for(lambda: _firing(api, pipeline, run_id) == expected, 20, f"exactly {expected} to fire")

        proc.send_signal(signal.SIGTERM)  # the scheduler's stop: graceful, exit 0, final state "signal"
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert "signal" in out
    assert f"metrics: http://127.0.0.1:{stack.metrics_port}/metrics" in err
    assert f"pushgateway: {stack.pushgateway.url} (job tidemark" in err

    # the final state stays in the Pushgateway, and Prometheus scrapes it from there
    group = f'pipeline="{pipeline}", run_id="{run_id}", job="tidemark"'
    wait_for(lambda: api.value(f'tidemark_run_state{{{group}, state="signal"}}') == 1, 30, "the final state")
    assert api.value(f'tidemark_run_state{{{group}, state="running"}}') == 0
    final_progress, _ = _last_progress(log)
    assert api.value(f"tidemark_batch_id{{{group}}}") == final_progress[-1]["batchId"]
    assert api.value(f"tidemark_run_end_timestamp_seconds{{{group}}}") is not None


def _firing(api: PrometheusAPI, pipeline: str, run_id: str) -> set[str]:
    alerts = api.vector(f'ALERTS{{alertstate="firing", pipeline="{pipeline}", run_id="{run_id}"}}')
    return {labels["alertname"] for labels, _ in alerts}


def _metric_names(expr: str) -> set[str]:
    """The series names an expression selects: plain names, and the alternatives of a __name__ regex."""
    names = set()
    for regex in re.findall(r'__name__=~"([^"]+)"', expr):
        names.update(regex.split("|"))
    bare = re.sub(r'"[^"]*"', '""', expr)
    bare = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    for word in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", bare):
        if word not in {"and", "or", "unless", "bool", "offset"}:
            names.add(word)
    return names


def _check_dashboard(api: PrometheusAPI, pipeline: str, run_id: str) -> None:
    model = dashboard()
    exported = api.metric_names()
    queries = expressions(model)
    assert len(queries) >= 15
    for expr in queries:
        concrete = expr.replace("$pipeline", pipeline).replace("$run_id", run_id)
        answer = api.query(concrete)
        assert answer["status"] == "success", (expr, answer)
        assert answer["data"]["result"], f"no data for {expr}"
        names = _metric_names(expr)
        assert names and names <= exported, (expr, names - exported)
        assert all(n.startswith(("tidemark_", "metrics_executor_")) for n in names), names
    broken = api.query(queries[0].replace("max by", "max by by"))
    assert broken["status"] == "error" and broken["errorType"] == "bad_data"
    for variable in model["templating"]["list"][1:]:
        query = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
        assert query is not None
        assert api.vector(query.group(1).replace("$pipeline", pipeline)), variable


def _group(stack: Stack, pipeline: str) -> dict[str, float]:
    """The pushed run_state of the pipeline's group(s): {state: value}."""
    states: dict[str, float] = {}
    for (name, labels), value in pushgateway_samples(stack.pushgateway.url).items():
        if name == "tidemark_run_state" and ("pipeline", pipeline) in labels:
            states[dict(labels)["state"]] = value
    return states


def _pushed(stack: Stack, name: str, pipeline: str) -> float | None:
    for (metric, labels), value in pushgateway_samples(stack.pushgateway.url).items():
        if metric == name and ("pipeline", pipeline) in labels:
            return value
    return None


def test_finished_run_pushes_its_final_state(spark: Any, stack: Stack, tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=300, keys=3, files=2, seed=4, malformed_fraction=0.02)
    config = load_config(
        write_config(
            tmp_path,
            pipeline={"name": "pushfinished"},
            checkpoint={"state_store": "hdfs"},
            monitor={"pushgateway": stack.pushgateway.url},
        )
    )
    result = run_pipeline(config, available_now=True)
    assert result.stopped is StopReason.FINISHED
    states = _group(stack, "pushfinished")
    assert states["finished"] == 1 and sum(states.values()) == 1
    assert _pushed(stack, "tidemark_batches_total", "pushfinished") == result.batches
    assert _pushed(stack, "tidemark_input_rows_total", "pushfinished") == result.input_rows
    assert _pushed(stack, "tidemark_quarantined_records_total", "pushfinished") == result.quarantined > 0


def test_run_stopped_by_its_deadline_pushes_max_duration(spark: Any, stack: Stack, tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=200, keys=3, files=2, seed=7)
    config = load_config(
        write_config(
            tmp_path,
            pipeline={"name": "pushdeadline"},
            trigger={"mode": "processing-time", "interval": "1 second"},
            checkpoint={"state_store": "hdfs"},
            monitor={"pushgateway": stack.pushgateway.url},
        )
    )
    result = run_pipeline(config, max_duration=timedelta(seconds=4))
    assert result.stopped is StopReason.MAX_DURATION
    states = _group(stack, "pushdeadline")
    assert states["max-duration"] == 1 and sum(states.values()) == 1
    assert _pushed(stack, "tidemark_batches_total", "pushdeadline") == result.batches


def test_failed_run_pushes_failed_and_the_alert_fires(spark: Any, stack: Stack, tmp_path: Path) -> None:
    generate_events(tmp_path / "landing", events=200, keys=3, files=2, seed=5, malformed_fraction=0.05)
    config = load_config(
        write_config(
            tmp_path,
            pipeline={"name": "pushfailed"},
            checkpoint={"state_store": "hdfs"},
            source={"options": {"mode": "FAILFAST"}},  # a malformed line now fails the batch
            monitor={"pushgateway": stack.pushgateway.url},
        )
    )
    with pytest.raises(Exception, match=r"(?i)malformed|failed"):
        run_pipeline(config, available_now=True)
    states = _group(stack, "pushfailed")
    assert states["failed"] == 1 and sum(states.values()) == 1
    wait_for(
        lambda: "TidemarkRunFailed" in {a["alertname"] for a, _ in stack.api.vector('ALERTS{pipeline="pushfailed"}')},
        30,
        "TidemarkRunFailed to fire",
    )


def test_stuck_run_pushes_stuck_while_hanging_and_at_stop(spark: Any, stack: Stack, tmp_path: Path) -> None:
    from tests.integration.test_monitor_run import _hanging_query, make_config

    config = make_config(
        tmp_path, "pushstuck", stuck_after="3 seconds", on_stuck="stop", pushgateway=stack.pushgateway.url
    )
    monitor = RunMonitor(spark, config, "run-stuck-push")
    monitor.start()
    try:
        query = _hanging_query(spark, tmp_path, "pushstuck", config)
        monitor.attach(query)
        # while the batch hangs: the watchdog's verdict reaches the Pushgateway before the query is stopped
        wait_for(lambda: _pushed(stack, "tidemark_stuck", "pushstuck") == 1, 60, "stuck=1 to be pushed")
        wait_for(lambda: not query.isActive, 90, "the watchdog to stop the query")
    finally:
        if query.isActive:
            query.stop()
        monitor.stop(ended=StopReason.REQUESTED.value)
    states = _group(stack, "pushstuck")
    assert states["stuck"] == 1 and sum(states.values()) == 1
    assert _pushed(stack, "tidemark_stuck", "pushstuck") == 1
    wait_for(
        lambda: (
            "TidemarkNoBatchCommitted"
            in {a["alertname"] for a, _ in stack.api.vector('ALERTS{pipeline="pushstuck", alertstate="firing"}')}
        ),
        30,
        "TidemarkNoBatchCommitted to fire",
    )


def test_port_in_use_and_unreachable_gateway_are_one_warning_each(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    generate_events(tmp_path / "landing", events=200, keys=3, files=2, seed=6)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = load_config(
            write_config(
                tmp_path,
                pipeline={"name": "badmetrics"},
                checkpoint={"state_store": "hdfs"},
                monitor={"metrics_port": port, "pushgateway": f"http://127.0.0.1:{free_port()}"},
            )
        )
        with caplog.at_level("WARNING", logger="tidemark"):
            result = run_pipeline(config, available_now=True)
    assert result.stopped is StopReason.FINISHED and result.batches >= 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("tidemark")]
    assert len(warnings) == 2, warnings
    assert any(f"cannot serve metrics on 127.0.0.1:{port}" in w for w in warnings)
    assert any("could not push metrics to the Pushgateway" in w for w in warnings)
    logged = [e for e in read_progress_log(str(result.monitor_log)) if e.type == "warning"]
    assert len(logged) == 2 and {e.data["code"] for e in logged} == {"METRICS"}
