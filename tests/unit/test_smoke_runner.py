"""tools/spark_lines/smoke.py: an environment that cannot be built fails the run loudly, the other targets still run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("smoke_runner", ROOT / "tools" / "spark_lines" / "smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_an_environment_that_cannot_be_built_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smoke = _smoke()
    ran: list[str] = []

    def build(target: Any, wheel: Path, uv: str) -> Path:
        if target.name == "4.0-py3.11":
            raise subprocess.CalledProcessError(1, ["uv", "pip", "install", "-r", "stack.txt"])
        return tmp_path / "python"

    def smoke_run(target: Any, python: Path, wheel: Path, uv: str, output: Path) -> int:
        ran.append(target.name)
        output.write_text(f"{target.name} says hello\n")
        return 0

    monkeypatch.setattr(smoke, "find_uv", lambda: "uv")
    monkeypatch.setattr(smoke, "build_wheel", lambda uv, python: tmp_path / "tidemark.whl")
    monkeypatch.setattr(smoke, "build", build)
    monkeypatch.setattr(smoke, "smoke", smoke_run)
    monkeypatch.setattr(smoke, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(sys, "argv", ["smoke.py", "run", "4.0@3.11", "4.2@3.11"])
    with pytest.raises(SystemExit) as exited:
        smoke.main()
    assert exited.value.code == "smoke runs failed: 4.0-py3.11 (environment not built)"
    assert ran == ["4.2-py3.11"]  # the next target still ran
    err = capsys.readouterr().err
    assert "4.0-py3.11: ENVIRONMENT NOT BUILT: `uv pip install -r stack.txt` exited 1" in err
    assert "4.2-py3.11 says hello" in err  # the run's own output, printed when it ended


def test_runs_side_by_side_each_print_whole_and_a_failed_one_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    smoke = _smoke()
    both_running = threading.Barrier(2, timeout=10)  # breaks (and fails the run) unless two runs overlap

    def smoke_run(target: Any, python: Path, wheel: Path, uv: str, output: Path) -> int:
        both_running.wait()
        output.write_text("".join(f"{target.name} line {n}\n" for n in range(3)))
        return 1 if target.name == "4.3-py3.11" else 0

    monkeypatch.setattr(smoke, "find_uv", lambda: "uv")
    monkeypatch.setattr(smoke, "build_wheel", lambda uv, python: tmp_path / "tidemark.whl")
    monkeypatch.setattr(smoke, "build", lambda target, wheel, uv: tmp_path / "python")
    monkeypatch.setattr(smoke, "smoke", smoke_run)
    monkeypatch.setattr(smoke, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(sys, "argv", ["smoke.py", "run", "--jobs", "2", "4.2@3.11", "4.3@3.11"])
    with pytest.raises(SystemExit) as exited:
        smoke.main()
    assert exited.value.code == "smoke runs failed: 4.3-py3.11"
    err = capsys.readouterr().err
    for name in ("4.2-py3.11", "4.3-py3.11"):  # each run's lines together, not interleaved with the other's
        block = "".join(f"{name} line {n}\n" for n in range(3))
        assert block in err, err


def test_the_cache_key_follows_the_pins_and_the_lock_not_the_comments() -> None:
    smoke = _smoke()
    target = smoke.Target.parse("3.5@3.11")
    first = smoke.env_dir(target, "pyspark==3.5.9\n", "pandas==2.3.3\n")
    assert smoke.env_dir(target, "pyspark==3.5.9\n", "pandas==2.3.3\n") == first
    assert smoke.env_dir(target, "pyspark==3.5.8\n", "pandas==2.3.3\n") != first  # a changed pin
    assert smoke.env_dir(target, "pyspark==3.5.9\n", "pandas==2.3.2\n") != first  # a changed lock
    assert smoke.env_dir(smoke.Target.parse("3.5@3.12"), "pyspark==3.5.9\n", "pandas==2.3.3\n") != first
