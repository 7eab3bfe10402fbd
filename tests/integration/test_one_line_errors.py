"""No stack trace without --debug: the common failures end in at most one error line (docs/cli.md).

The Spark-bound cases run in-process on the shared session with the process's file descriptors captured, so a
Java or Python stack written by anything (Spark's log4j, pyspark's loggers, py4j) would be seen here too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TIDEMARK = str(Path(sys.executable).with_name("tidemark"))


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def listing(root: Path) -> dict[str, tuple[int, str]]:
    """Every file below root with its size and sha256: what 'nothing was touched' compares."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_key_expression_naming_a_missing_field_is_one_line(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(FIXTURES / "spark35" / "hdfs_window", checkpoint)
    code = main(["state", "show", str(checkpoint), "--key", "key.user = 'u1'"])
    captured = capfd.readouterr()
    assert code == 2
    (line,) = error_lines(captured.err)
    assert line.startswith("error: --key \"key.user = 'u1'\" does not apply to this store")
    assert "No such struct field `user`" in line
    assert captured.out == ""


def test_an_unknown_namenode_is_one_line(spark: Any, capfd: pytest.CaptureFixture[str]) -> None:
    code = main(["checkpoint", "inspect", "hdfs://no-such-namenode.invalid/checkpoint"])
    captured = capfd.readouterr()
    assert code == 1
    (line,) = error_lines(captured.err)
    assert line.startswith("error: cannot open hdfs://no-such-namenode.invalid/checkpoint:")
    assert "UnknownHost" in line and "HADOOP_CONF_DIR" in line


def _cli(
    args: list[str], env: dict[str, str] | None = None, user: int | None = None
) -> subprocess.CompletedProcess[str]:
    command = [TIDEMARK, *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_gs_without_its_extra_and_without_credentials_is_one_line(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "gcsfs"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'gcsfs'\")\n")
    done = _cli(["checkpoint", "inspect", "gs://bucket/checkpoint"], env={"PYTHONPATH": str(shim.parent)})
    assert done.returncode == 1
    assert error_lines(done.stderr) == ["error: gcs paths need the 'gcs' extra: pip install 'tidemark[gcs]'"]
    no_credentials = {"NO_GCE_CHECK": "True", "GOOGLE_APPLICATION_CREDENTIALS": "", "HOME": str(tmp_path)}
    for args in (["checkpoint", "inspect", "gs://bucket/checkpoint"], ["analyze", "gs://bucket/logs/run.jsonl"]):
        done = _cli(args, env=no_credentials)
        assert done.returncode == 1, done.stderr
        (line,) = error_lines(done.stderr)
        assert "no Google credentials found" in line and "unexpected error" not in line


def test_unreadable_files_are_one_line(tmp_path: Path) -> None:
    """As another user when the tests run as root (root reads everything)."""
    log = tmp_path / "run.jsonl"
    shutil.copy(FIXTURES / "progress" / "windowed_hdfs.jsonl", log)
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(FIXTURES / "spark35" / "hdfs_window", checkpoint)
    log.chmod(0o000)
    checkpoint.chmod(0o000)
    tmp_path.chmod(0o755)
    user = 65534 if os.geteuid() == 0 else None
    try:
        for args, expected in (
            (["analyze", str(log)], f"error: cannot open {log}: permission denied"),
            (["report", str(log), "-o", str(tmp_path / "r.html")], f"error: cannot open {log}: permission denied"),
            (["checkpoint", "inspect", str(checkpoint)], f"error: cannot open {checkpoint}: permission denied"),
        ):
            done = _cli(args, user=user)
            assert done.returncode == 1, done.stderr
            (line,) = error_lines(done.stderr)
            assert line.startswith(expected), line
    finally:
        checkpoint.chmod(0o755)
        log.chmod(0o644)
    assert not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def written(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline tidemark ran once (window per user), to point other configs at."""
    root = tmp_path_factory.mktemp("written")
    generate_events(root / "landing", events=300, keys=3, files=2, seed=4)
    run_pipeline(load_config(write_config(root)), available_now=True)
    return root


def test_run_refuses_a_checkpoint_check_rejects_and_touches_nothing(
    written: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "job"
    shutil.copytree(written, root)
    generate_events(root / "landing-more", events=50, keys=3, files=1, seed=5)
    shutil.copy(next((root / "landing-more").iterdir()), root / "landing" / "new.json")
    # Another window size: the sink's columns and folders still match (checked first), the checkpoint does not.
    config = write_config(root, aggregation={"window": "10 minutes"})
    before = listing(root)
    code = main(["run", str(config), "--available-now"])
    captured = capfd.readouterr()
    assert code == 1
    (line,) = [line for line in error_lines(captured.err) if not line.startswith("tidemark running")]
    assert "cannot continue the checkpoint" in line and "WINDOW" in line and "Nothing was run" in line
    assert "finished" not in captured.out
    assert listing(root) == before


def test_run_refuses_a_checkpoint_location_holding_something_else(
    written: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "job"
    shutil.copytree(written, root)
    config = write_config(root, checkpoint={"location": "output"})
    before = listing(root)
    code = main(["run", str(config), "--available-now"])
    captured = capfd.readouterr()
    assert code == 1
    (line,) = [line for line in error_lines(captured.err) if not line.startswith("tidemark running")]
    assert "is a query's output folder" in line and "[checkpoint] location" in line
    assert listing(root) == before
