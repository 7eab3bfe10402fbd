"""The tests' Kafka broker runs only the jars tools/kafka/broker.lock.json pins (issue 37): sha256 and size per
Maven coordinate, checked by `make kafka` and before every broker start."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "kafka" / "lock.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("broker_lock", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jar(root: Path, coordinate: str, data: bytes) -> Path:
    group, artifact, version = coordinate.split(":")
    path = root / "repository" / Path(*group.split(".")) / artifact / version / f"{artifact}-{version}.jar"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def test_the_lock_names_every_jar_of_the_classpath_with_its_sha256() -> None:
    tool = _tool()
    lock = json.loads(tool.LOCK.read_text())
    assert "org.apache.kafka:kafka_2.13:4.1.1" in lock and len(lock) >= 40
    assert all(len(v["sha256"]) == 64 and v["size"] > 0 for v in lock.values())


def test_a_jar_that_is_not_the_locked_one_is_named(tmp_path: Path) -> None:
    tool = _tool()
    good = _jar(tmp_path, "org.example:alpha:1.0", b"alpha")
    other = _jar(tmp_path, "org.example:beta:2.0", b"beta")
    lock = {
        "org.example:alpha:1.0": {"sha256": hashlib.sha256(b"alpha").hexdigest(), "size": 5},
        "org.example:beta:2.0": {"sha256": hashlib.sha256(b"beta").hexdigest(), "size": 4},
    }
    assert tool.coordinate(good) == "org.example:alpha:1.0"
    assert tool.problems([good, other], lock) == []
    other.write_bytes(b"bets")  # same size, other bytes
    (problem,) = tool.problems([good, other], lock)
    assert "is not the locked org.example:beta:2.0" in problem
    stranger = _jar(tmp_path, "org.example:gamma:3.0", b"g")
    assert any("gamma:3.0" in p and "not in" in p for p in tool.problems([good, stranger], lock))
    assert any("beta:2.0 is locked but not on the classpath" in p for p in tool.problems([good], lock))


def test_verify_exits_non_zero_on_a_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    jar = _jar(tmp_path, "org.example:alpha:1.0", b"alpha")
    classpath = tmp_path / "classpath.txt"
    classpath.write_text(str(jar))
    monkeypatch.setattr(tool, "LOCK", tmp_path / "lock.json")
    (tmp_path / "lock.json").write_text(json.dumps({"org.example:alpha:1.0": {"sha256": "0" * 64, "size": 5}}))
    monkeypatch.setattr("sys.argv", ["lock.py", "verify", str(classpath)])
    with pytest.raises(SystemExit, match="do not match"):
        tool.main()
