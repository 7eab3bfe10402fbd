"""The CLI: exit codes, JSON keys, dry run by default; and no pyspark import for local paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.checkpoint import synthetic
from tidemark.cli.main import main


def test_inspect_json_keys_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=3)
    assert main(["checkpoint", "inspect", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in (
        "query_id",
        "latest_offset_batch",
        "latest_committed_batch",
        "files_total",
        "bytes_total",
        "operators",
        "findings",
    ):
        assert key in data
    assert set(data["operators"][0]) >= {"id", "name", "partitions", "files", "bytes", "files_by_kind"}
    broken = tmp_path / "broken"
    synthetic.query(broken)
    synthetic.offsets(broken, [0])
    assert main(["checkpoint", "inspect", str(broken), "--json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert findings[0].keys() == {"code", "severity", "message", "fix", "file", "impact"}
    assert main(["checkpoint", "inspect", str(broken)]) == 1
    assert "NO_COMMITTED_BATCH" in capsys.readouterr().out


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    root = synthetic.simple(tmp_path / "ck", batches=3)
    assert main(["checkpoint", "prune", str(root), "--keep", "0"]) == 2


def test_prune_dry_run_then_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=6)
    assert main(["checkpoint", "prune", str(root), "--keep", "2"]) == 0
    assert "would remove" in capsys.readouterr().out and (root / "offsets/0").exists()
    assert main(["checkpoint", "prune", str(root), "--keep", "2", "--apply", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["applied"] and "offsets/0" in result["paths"]
    assert not (root / "offsets/0").exists()


def test_local_inspect_does_not_import_pyspark(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ck", batches=2)
    code = (
        "import sys; from tidemark.cli.main import main; rc = main(['checkpoint', 'inspect', sys.argv[1], '--json']);"
        "heavy = [m for m in ('pyspark', 'pandas', 'pyarrow') if m in sys.modules]; print(heavy, file=sys.stderr);"
        "sys.exit(10 if heavy else rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
