"""A figure the state store did not count is "not tracked", never 0: run, analyze, the metrics, plan memory.

tidemark's defaults run a window aggregation on RocksDB without row tracking (numRowsTotal is then 0). The rows
really in state are counted here with Spark's own statestore reader, independently of tidemark's code.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows_in_state(spark: Any, checkpoint: Path, batch: int | None = None) -> int:
    reader = spark.read.format("statestore")
    if batch is not None:
        reader = reader.option("batchId", batch)
    return int(reader.load(str(checkpoint)).count())


@pytest.fixture(scope="module")
def ran(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The default pipeline (RocksDB, rows not tracked), run through the CLI; (its folder, what run printed)."""
    root = tmp_path_factory.mktemp("honest")
    generate_events(root / "landing", events=600, keys=5, files=3, seed=11)
    config = write_config(root, checkpoint={"location": "checkpoint", "state_store": "rocksdb"})
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", str(config), "--available-now"])
    assert code == 0, err.getvalue()
    return root, err.getvalue()


def test_run_says_not_tracked_instead_of_0(ran: tuple[Path, str]) -> None:
    _, printed = ran
    batch_lines = [line for line in printed.splitlines() if line.startswith("batch ")]
    assert batch_lines
    assert all("state rows not tracked" in line for line in batch_lines), batch_lines
    assert "state 0 rows" not in printed
    assert "track_state_rows = true" in printed


def test_the_progress_log_records_it_and_analyze_shows_it(
    ran: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = ran
    log = root / "checkpoint-monitor"
    (started,) = [
        json.loads(line) for f in log.glob("*.jsonl") for line in f.read_text().splitlines() if '"started"' in line
    ]
    assert started["state_rows_tracked"] is False
    assert main(["analyze", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (run,) = data["runs"]
    assert run["state_rows_tracked"] is False
    (trend,) = run["state_rows_trend"]
    assert trend["first_rows"] is None and trend["last_rows"] is None and trend["rows_per_batch"] is None
    assert "STATE_ROWS_NOT_TRACKED" in {f["code"] for f in run["findings"]}
    assert "UNBOUNDED_STATE_GROWTH" not in {f["code"] for f in run["findings"]}
    assert main(["analyze", str(log)]) == 0
    out = capsys.readouterr().out
    assert "rows not tracked" in out and "-> 0 rows" not in out


def test_plan_memory_counts_the_rows_in_the_checkpoint_not_the_logs_zero(
    spark: Any, ran: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = ran
    in_state = _rows_in_state(spark, root / "checkpoint")
    assert in_state > 0
    assert main(["plan", "memory", "--from-log", str(root / "checkpoint-monitor"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["forecast"]["growth"]["keys_now"] == in_state
    assert any("not tracked" in note and str(root / "checkpoint") in note for note in plan["notes"])


def test_plan_memory_from_a_pruned_checkpoint_picks_a_committed_batch(
    spark: Any, ran: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(ran[0] / "checkpoint", checkpoint)
    assert main(["checkpoint", "prune", str(checkpoint), "--keep", "1", "--apply"]) == 0
    capsys.readouterr()
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert main(["plan", "memory", "--from-checkpoint", str(checkpoint), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["forecast"]["growth"]["keys_now"] == _rows_in_state(spark, checkpoint)
    assert main(["plan", "memory", "--from-checkpoint", str(checkpoint), "--batch", str(committed[0]), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["forecast"]["growth"]["last_batch"] == committed[0]
    assert plan["forecast"]["growth"]["keys_now"] == _rows_in_state(spark, checkpoint, committed[0])
    assert main(["plan", "memory", "--from-checkpoint", str(checkpoint), "--batch", "0"]) == 2
    assert "--batch 0 is not a committed batch" in capsys.readouterr().err
