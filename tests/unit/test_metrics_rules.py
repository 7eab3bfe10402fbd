"""The alert rules file: valid for `promtool check rules`, and each rule fires on synthetic series exactly when it
should (`promtool test rules`, Debian's prometheus package: make prometheus)."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tidemark.cli.main import main
from tidemark.errors import UsageError
from tidemark.monitor.alerts import AlertThresholds, alert_rules, promql_duration, rules_yaml
from tidemark.sizing.advice import COMMIT_SHARE_HIGH

SEVERITY = {rule.name: rule.severity for rule in alert_rules(AlertThresholds())}
LENGTH = 150  # minutes of synthetic series


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is needed (Debian package prometheus: make prometheus)"
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=60)


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def run(pipeline: str, run_id: str, state: str = "running", stuck_after: int = 600) -> list[dict[str, str]]:
    """The run-level series tidemark exports for one run, started at time 0, in this state throughout."""
    ids = {"pipeline": pipeline, "run_id": run_id}
    states = [
        series("tidemark_run_state", f"{1 if s == state else 0}x{LENGTH}", **ids, state=s)
        for s in ("running", "finished", "failed", "stuck")
    ]
    return [
        *states,
        series("tidemark_run_start_timestamp_seconds", f"0x{LENGTH}", **ids),
        series("tidemark_stuck_after_seconds", f"{stuck_after}x{LENGTH}", **ids),
    ]


def query(name: str, values: str, pipeline: str, run_id: str, **extra: str) -> dict[str, str]:
    return series(name, values, pipeline=pipeline, run_id=run_id, query=pipeline, **extra)


def alert(name: str, summary: str, limits: AlertThresholds | None = None, **labels: str) -> dict[str, Any]:
    """An expected alert; the description is the rule's fixed text for these limits."""
    description = {rule.name: rule.description for rule in alert_rules(limits or AlertThresholds())}[name]
    return {
        "exp_labels": {"severity": SEVERITY[name], **labels},
        "exp_annotations": {"summary": summary, "description": description},
    }


def check(name: str, at: str, *alerts: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(alerts)}


def run_tests(tmp_path: Path, tests: list[dict[str, Any]], limits: AlertThresholds | None = None) -> None:
    rules = tmp_path / "tidemark-rules.yml"
    rules.write_text(rules_yaml(limits or AlertThresholds()), encoding="utf-8")
    spec = tmp_path / "tests.yml"  # JSON is YAML
    spec.write_text(json.dumps({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}))
    done = run_promtool("test", "rules", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_file_passes_promtool_check(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_yaml(AlertThresholds(stuck_after=timedelta(minutes=20))), encoding="utf-8")
    done = run_promtool("check", "rules", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    """The check above can fail: the same file with one expression broken does not pass."""
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_yaml(AlertThresholds()).replace("> 0.25", "> > 0.25"), encoding="utf-8")
    assert run_promtool("check", "rules", str(rules)).returncode != 0


def test_no_batch_committed_fires_after_each_runs_stuck_after(tmp_path: Path) -> None:
    name = "TidemarkNoBatchCommitted"
    inputs = [
        # a: batches every minute until minute 20, then nothing: 10 minutes (its stuck_after) later it fires
        *run("a", "r1"),
        query("tidemark_last_progress_timestamp_seconds", f"0+60x20 1200x{LENGTH - 21}", "a", "r1"),
        query("tidemark_stuck", f"0x{LENGTH}", "a", "r1"),
        # b: one batch, then idle (Spark's idle reports keep coming): alive, never fires
        *run("b", "r1"),
        query("tidemark_last_progress_timestamp_seconds", f"0x{LENGTH}", "b", "r1"),
        query("tidemark_last_idle_timestamp_seconds", f"0+60x{LENGTH - 1}", "b", "r1"),
        # c: idle until minute 10, then a batch started and hangs (no progress, no idle report)
        *run("c", "r1"),
        query("tidemark_last_idle_timestamp_seconds", f"0+60x10 600x{LENGTH - 11}", "c", "r1"),
        # d: no batch at all since its start, with a 30-minute stuck_after
        *run("d", "r1", stuck_after=1800),
        # e: ended long ago (finished): its frozen figures in the Pushgateway must not alert
        *run("e", "r1", state="finished"),
        query("tidemark_last_progress_timestamp_seconds", f"0x{LENGTH}", "e", "r1"),
        query("tidemark_stuck", f"0x{LENGTH}", "e", "r1"),
        # f: the watchdog found a batch stuck at minute 3 (before the time limit), and the run ended as stuck
        *run("f", "r1", state="stuck"),
        query("tidemark_last_progress_timestamp_seconds", f"0x{LENGTH}", "f", "r1"),
        query("tidemark_stuck", f"0 0 0 1x{LENGTH - 3}", "f", "r1"),
    ]
    checks = [
        check(name, "2m"),
        check(name, "4m", alert(name, "pipeline f (run r1): no batch committed for 4m 0s", pipeline="f", run_id="r1")),
        check(
            name,
            "29m",
            alert(name, "pipeline c (run r1): no batch committed for 19m 0s", pipeline="c", run_id="r1"),
            alert(name, "pipeline f (run r1): no batch committed for 29m 0s", pipeline="f", run_id="r1"),
        ),
        check(
            name,
            "31m",
            alert(name, "pipeline a (run r1): no batch committed for 11m 0s", pipeline="a", run_id="r1"),
            alert(name, "pipeline c (run r1): no batch committed for 21m 0s", pipeline="c", run_id="r1"),
            alert(name, "pipeline d (run r1): no batch committed for 31m 0s", pipeline="d", run_id="r1"),
            alert(name, "pipeline f (run r1): no batch committed for 31m 0s", pipeline="f", run_id="r1"),
        ),
    ]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


def test_no_batch_committed_with_a_fixed_limit(tmp_path: Path) -> None:
    name = "TidemarkNoBatchCommitted"
    limits = AlertThresholds(stuck_after=timedelta(minutes=2, seconds=30))
    inputs = [*run("a", "r1"), query("tidemark_last_progress_timestamp_seconds", f"0x{LENGTH}", "a", "r1")]
    fired = alert(name, "pipeline a (run r1): no batch committed for 3m 0s", limits, pipeline="a", run_id="r1")
    checks = [check(name, "2m"), check(name, "3m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}], limits)


def test_state_growing_while_the_watermark_advances(tmp_path: Path) -> None:
    name = "TidemarkStateGrowing"
    op = {"operator": "stateStoreSave", "operator_id": "0"}
    inputs = [
        # a: 10 more rows every minute while the watermark advances a minute a minute: a leak
        *run("a", "r1"),
        query("tidemark_state_rows", f"100+10x{LENGTH - 1}", "a", "r1", **op),
        query("tidemark_watermark_timestamp_seconds", f"0+60x{LENGTH - 1}", "a", "r1"),
        # b: windows open and close (sawtooth around a steady level): healthy
        *run("b", "r1"),
        query("tidemark_state_rows", " ".join(["100 130 160 190 120"] * (LENGTH // 5)), "b", "r1", **op),
        query("tidemark_watermark_timestamp_seconds", f"0+60x{LENGTH - 1}", "b", "r1"),
        # c: state grows while the watermark stands still (no new event time): not this rule's business
        *run("c", "r1"),
        query("tidemark_state_rows", f"100+10x{LENGTH - 1}", "c", "r1", **op),
        query("tidemark_watermark_timestamp_seconds", f"0x{LENGTH}", "c", "r1"),
        # d: the same leak as a, but the run has ended
        *run("d", "r1", state="finished"),
        query("tidemark_state_rows", f"100+10x{LENGTH - 1}", "d", "r1", **op),
        query("tidemark_watermark_timestamp_seconds", f"0+60x{LENGTH - 1}", "d", "r1"),
    ]
    fired = alert(
        name,
        "pipeline a (run r1): state of stateStoreSave grows by 600 rows/hour while the watermark advances",
        pipeline="a",
        run_id="r1",
        query="a",
        operator="stateStoreSave",
    )
    checks = [check(name, "25m"), check(name, "45m", fired), check(name, "120m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


def test_commit_share_above_the_planners_threshold(tmp_path: Path) -> None:
    name = "TidemarkCommitShareHigh"
    high, low = COMMIT_SHARE_HIGH + 0.05, COMMIT_SHARE_HIGH - 0.05
    inputs = [
        *run("a", "r1"),
        query("tidemark_state_commit_wall_seconds_total", f"0+{high * 10:g}x{LENGTH - 1}", "a", "r1"),
        query("tidemark_batch_duration_seconds_total", f"0+10x{LENGTH - 1}", "a", "r1"),
        *run("b", "r1"),
        query("tidemark_state_commit_wall_seconds_total", f"0+{low * 10:g}x{LENGTH - 1}", "b", "r1"),
        query("tidemark_batch_duration_seconds_total", f"0+10x{LENGTH - 1}", "b", "r1"),
    ]
    share = f"{high * 100:g}%"
    fired = alert(name, f"pipeline a (run r1): committing state takes {share} of batch time", **_ids("a"))
    checks = [check(name, "3m"), check(name, "20m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


def _ids(pipeline: str) -> dict[str, str]:
    return {"pipeline": pipeline, "run_id": "r1", "query": pipeline}


def test_quarantine_share_above_the_limit(tmp_path: Path) -> None:
    name = "TidemarkQuarantineShareHigh"
    inputs = [
        *run("a", "r1"),
        query("tidemark_quarantined_records_total", f"0+3x{LENGTH - 1}", "a", "r1"),
        query("tidemark_input_rows_total", f"0+100x{LENGTH - 1}", "a", "r1"),
        *run("b", "r1"),  # 0.5 %: under the 1 % default
        query("tidemark_quarantined_records_total", f"0+1x{LENGTH - 1}", "b", "r1"),
        query("tidemark_input_rows_total", f"0+200x{LENGTH - 1}", "b", "r1"),
        *run("c", "r1"),  # no input at all: 0/0 is no alert
        query("tidemark_quarantined_records_total", f"0x{LENGTH}", "c", "r1"),
        query("tidemark_input_rows_total", f"0x{LENGTH}", "c", "r1"),
    ]
    fired = alert(name, "pipeline a (run r1): 3% of the input went to quarantine", **_ids("a"))
    checks = [check(name, "3m"), check(name, "20m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])
    # with the limit raised to 5 %, pipeline a is quiet too
    (tmp_path / "strict").mkdir()
    quiet = [{"interval": "1m", "input_series": inputs, "alert_rule_test": [check(name, "20m")]}]
    run_tests(tmp_path / "strict", quiet, AlertThresholds(quarantine_share=0.05))


def test_watermark_lag_above_the_limit_counts_each_run_once(tmp_path: Path) -> None:
    name = "TidemarkWatermarkLagHigh"
    inputs = [
        *run("a", "r1"),
        # the same run scraped directly and through the Pushgateway: two jobs, one alert
        query("tidemark_watermark_lag_seconds", f"4000x{LENGTH}", "a", "r1", job="tidemark-direct"),
        query("tidemark_watermark_lag_seconds", f"4000x{LENGTH}", "a", "r1", job="tidemark"),
        *run("b", "r1"),
        query("tidemark_watermark_lag_seconds", f"1800x{LENGTH}", "b", "r1"),
        *run("c", "r1", state="finished"),
        query("tidemark_watermark_lag_seconds", f"4000x{LENGTH}", "c", "r1"),
    ]
    fired = alert(name, "pipeline a (run r1): the watermark trails the batch time by 1h 6m 40s", **_ids("a"))
    checks = [check(name, "4m"), check(name, "6m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


def test_rocksdb_crawl_ahead_while_the_run_goes_on(tmp_path: Path) -> None:
    name = "TidemarkRocksDBCrawlAhead"
    warned = query("tidemark_rocksdb_crawl_warning", f"0x20 1x{LENGTH - 21}", "a", "r1")
    quiet = query("tidemark_rocksdb_crawl_warning", f"0x{LENGTH}", "b", "r1")
    over = query("tidemark_rocksdb_crawl_warning", f"1x{LENGTH}", "c", "r1")  # an ended run: quiet
    inputs = [*run("a", "r1"), *run("b", "r1"), *run("c", "r1", state="finished"), warned, quiet, over]
    fired = alert(
        name,
        "pipeline a (run r1): RocksDB reads go to disk more and more batch after batch",
        pipeline="a",
        run_id="r1",
        query="a",
    )
    checks = [check(name, "10m"), check(name, "30m", fired)]
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


def test_failed_run(tmp_path: Path) -> None:
    name = "TidemarkRunFailed"
    inputs = [*run("a", "r1", state="failed"), *run("b", "r1", state="finished"), *run("c", "r1")]
    fired = alert(name, "pipeline a (run r1) failed", pipeline="a", run_id="r1")
    run_tests(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": [check(name, "1m", fired)]}])


def test_promql_durations() -> None:
    assert promql_duration(timedelta(hours=1, minutes=30)) == "1h30m"
    assert promql_duration(timedelta(seconds=90)) == "1m30s"
    assert promql_duration(timedelta(days=1, milliseconds=250)) == "1d250ms"


def test_bad_thresholds_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="commit-share"):
        AlertThresholds(commit_share=25)
    with pytest.raises(UsageError, match="window"):
        AlertThresholds(window=timedelta(0))


def test_cli_prints_the_rules_with_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["metrics", "rules", "--stuck-after", "20m", "--quarantine-share", "0.02", "--watermark-lag", "2h"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text == rules_yaml(
        AlertThresholds(stuck_after=timedelta(minutes=20), quarantine_share=0.02, watermark_lag=timedelta(hours=2))
    )
    assert "> 1200\n" in text and "> 0.02\n" in text and "> 7200\n" in text
    (tmp_path / "r.yml").write_text(text)
    assert run_promtool("check", "rules", str(tmp_path / "r.yml")).returncode == 0
    assert main(["metrics", "rules", "--commit-share", "2"]) == 2
