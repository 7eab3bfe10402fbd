"""`tidemark plan memory` and `tidemark plan checkpoint` end to end through the CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"
MB = 1024 * 1024


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_memory_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "memory", "--executor-memory", "4g", "--executors", "2", "--state-bytes", "2g"]
    data = _json(capsys, [*argv, "--shuffle-bytes", "512m", "--cached-bytes", "200m", "--scale", "2", "--json"])
    assert {"per_executor", "cluster", "verdict", "recommendation", "projection", "layout"} <= data.keys()
    cluster = data["cluster"]
    assert isinstance(cluster, dict)
    # per executor: (1024 + 256) MB required of 2277.6 - 100 MB; the cluster doubles both
    assert cluster["required_bytes"] == pytest.approx(2560 * MB)
    assert cluster["execution_available_bytes"] == pytest.approx(2 * (2277.6 - 100) * MB)
    assert cluster["utilization"] == pytest.approx(1280 / 2177.6)
    assert data["verdict"] == "ok"
    projection = data["projection"]
    assert isinstance(projection, dict)
    assert projection["verdict"] == "over"


def test_memory_reads_the_state_from_a_log_and_the_store_it_used(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["plan", "memory", "--from-log", str(FIXTURES / "rocksdb.jsonl"), "--json"])
    conf, load = data["conf"], data["load"]
    assert isinstance(conf, dict) and isinstance(load, dict)
    assert conf["state_store"] == "rocksdb"
    assert load["state_bytes"] > 0


def test_memory_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "memory", "--executor-memory", "4g", "--state-bytes", "2000m"]) == 0
    text = capsys.readouterr().out
    assert "3,796.0 MB" in text
    assert "2,277.6 MB" in text
    assert "tight" in text


def test_bad_size_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "memory", "--state-bytes", "a lot"]) == 2
    captured = capsys.readouterr()
    assert "cannot read size" in captured.err
    assert "Traceback" not in captured.err


def test_bad_state_store_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "memory", "--state-store", "redis"]) == 2
    assert "--state-store" in capsys.readouterr().err


def test_checkpoint_json(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, ["plan", "checkpoint", str(FIXTURES / "rocksdb.jsonl"), "--cores", "2", "--json"])
    assert data["recommendation"] == "rocksdb+changelog"
    assert data["state_store"] == "rocksdb"
    findings = data["findings"]
    assert isinstance(findings, list)
    assert findings[0]["code"] == "COMMIT_SHARE_HIGH"


def test_checkpoint_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "checkpoint", str(FIXTURES / "hdfs.jsonl"), "--cores", "2"]) == 0
    assert "recommendation: keep" in capsys.readouterr().out


def test_missing_log_is_a_failure_not_usage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["plan", "checkpoint", str(tmp_path / "nope.jsonl")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_plan_commands_do_not_import_spark() -> None:
    code = (
        "import sys; from tidemark.cli.main import main; "
        "main(['plan', 'memory', '--executor-memory', '2g', '--state-bytes', '100m', '--json']); "
        "sys.exit(1 if any(m.startswith(('pyspark', 'pandas')) for m in sys.modules) else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def test_memory_with_config_and_rest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.unit.test_plan_load import CONFIG

    config = tmp_path / "tidemark.toml"
    config.write_text(CONFIG)
    rest = str(FIXTURES / "executors.json")
    data = _json(capsys, ["plan", "memory", "--config", str(config), "--from-rest", rest, "--json"])
    conf, load = data["conf"], data["load"]
    assert isinstance(conf, dict) and isinstance(load, dict)
    assert (conf["executor_memory_bytes"], conf["executors"], conf["state_store"]) == (6 * 1024 * MB, 3, "rocksdb")
    executors = json.loads((FIXTURES / "executors.json").read_text())
    assert load["shuffle_bytes"] == executors[0]["peakMemoryMetrics"]["OnHeapExecutionMemory"]
    assert load["cached_bytes"] == executors[0]["memoryUsed"]
