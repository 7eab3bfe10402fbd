"""tools/reliability.py: docs/reliability.md's fault matrix against what the marked tests proved in a run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reliability_tool", ROOT / "tools" / "reliability.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tool = _tool()
DOC = "# intro\n\n<!-- reliability:begin -->\n<!-- reliability:end -->\n\nafter\n"


def _every_cell(spark: str) -> list[dict[str, str]]:
    line = tool.spark_line(spark)
    return [
        {"test": f"tests/x.py::test_{n}", "fault": c.fault, "storage": c.storage, "sink": c.sink, "outcome": "passed"}
        for n, c in enumerate(tool.MATRIX)
        if c.lines.get(line, "not here") is None
    ]


def _write(folder: Path, name: str, spark: str, results: list[dict[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"spark": spark, "python": "3.11.7", "results": results}))


def _run(tmp_path: Path, edit: Any = None) -> tuple[str, list[Any]]:
    """Results proving every cell (edited by `edit(list_41, list_42)`), and a doc rendered from the unedited ones."""
    on_41, on_42 = _every_cell("4.1.1"), _every_cell("4.2.1")
    _write(tmp_path / "all", "default-py3.11.gw0", "4.1.1", on_41[:5])
    _write(tmp_path / "all", "default-py3.11.gw1", "4.1.1", on_41[5:])
    _write(tmp_path / "all", "4.2-py3.11", "4.2.1", on_42)
    doc = tool.with_table(DOC, tool.render(tool.load_results(tmp_path / "all")))
    if edit is not None:
        edit(on_41, on_42)
    _write(tmp_path / "run", "default-py3.11", "4.1.1", on_41)
    _write(tmp_path / "run", "4.2-py3.11", "4.2.1", on_42)
    return doc, tool.load_results(tmp_path / "run")


def test_a_run_that_proves_every_cell_matches_its_rendered_doc(tmp_path: Path) -> None:
    doc, results = _run(tmp_path)
    assert tool.compare(doc, results) == []
    table = tool.table_of(doc)
    assert "| driver kill | azure abfs | delta | yes | yes | `tests/x.py::test_" in table
    assert "| driver kill | s3 (moto) | delta | yes | yes | `tests/x.py::test_" in table
    assert f"| driver kill | azure wasbs | parquet | yes | no: {tool.NO_WASB} |" in table
    assert "| 10% 503s | s3 (moto) | delta | yes | - |" in table
    assert doc.startswith("# intro\n") and doc.endswith("<!-- reliability:end -->\n\nafter\n")
    # A result of a line the matrix does not cover (the 4.3 smoke lane) changes nothing.
    _write(tmp_path / "run", "4.3-py3.11", "4.3.0", [{**_every_cell("4.1.1")[0], "outcome": "refused"}])
    assert tool.compare(doc, tool.load_results(tmp_path / "run")) == []


def test_a_failed_a_skipped_and_a_refused_test_prove_nothing(tmp_path: Path) -> None:
    def edit(on_41: list[dict[str, str]], on_42: list[dict[str, str]]) -> None:
        on_41[0]["outcome"] = "failed"
        on_41[1]["outcome"] = "skipped"
        on_42[0]["outcome"] = "refused"

    doc, results = _run(tmp_path, edit)
    problems = tool.compare(doc, results)
    assert "driver kill / local / parquet on Spark 4.1: tests/x.py::test_0 failed: it proves nothing" in problems
    assert "driver kill / local / delta on Spark 4.1: tests/x.py::test_1 skipped: it proves nothing" in problems
    assert "driver kill / local / parquet on Spark 4.2: tests/x.py::test_0 refused: it proves nothing" in problems
    assert "driver kill / local / parquet on Spark 4.1: the doc says yes, but no test proved it in this run" in problems
    assert len(problems) == 6, problems


def test_a_cell_nobody_proved_and_a_cell_the_matrix_lacks(tmp_path: Path) -> None:
    def edit(on_41: list[dict[str, str]], on_42: list[dict[str, str]]) -> None:
        gone = next(r for r in on_41 if r["fault"] == "repartition killed at swap" and r["storage"] == "s3 (moto)")
        on_41.remove(gone)
        on_42[0]["fault"] = "driver kil"  # a typo in a mark

    doc, results = _run(tmp_path, edit)
    assert tool.compare(doc, results) == [
        "driver kil / local / parquet on Spark 4.2: tests/x.py::test_0 names a cell the matrix does not have "
        "(tools/reliability.py MATRIX)",
        "driver kill / local / parquet on Spark 4.2: the doc says yes, but no test proved it in this run",
        "repartition killed at swap / s3 (moto) / - on Spark 4.1: the doc says yes, but no test proved it in this run",
    ]
    # Rendered from this run, the table says so; the check still fails: the matrix gives no reason why.
    rendered = tool.with_table(DOC, tool.render(results))
    assert "| repartition killed at swap | s3 (moto) | - | missing | - | - |" in rendered
    assert tool.compare(rendered, results)[-1] == (
        "repartition killed at swap / s3 (moto) / - on Spark 4.1: no test proved it in this run and the matrix gives "
        "no reason why"
    )


def test_a_pass_where_the_matrix_says_it_cannot_run(tmp_path: Path) -> None:
    def edit(on_41: list[dict[str, str]], on_42: list[dict[str, str]]) -> None:
        on_42.append({**on_41[0], "storage": "azure wasbs"})

    doc, results = _run(tmp_path, edit)
    assert tool.compare(doc, results) == [
        "driver kill / azure wasbs / parquet on Spark 4.2: tests/x.py::test_0 passed, but the matrix says it cannot "
        f"run: {tool.NO_WASB}"
    ]


def test_a_doc_edited_by_hand_and_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, _ = _run(tmp_path)
    path = tmp_path / "reliability.md"
    path.write_text(doc.replace("`tests/x.py::test_3`", "`tests/y.py::test_3`"))
    with pytest.raises(SystemExit) as exited:
        tool.main(["--doc", str(path), "--results", str(tmp_path / "run")])
    assert exited.value.code == "the fault matrix in reliability.md does not match this run (1 differences)"
    assert "differs from what this run renders" in capsys.readouterr().err
    tool.main(["--doc", str(path), "--results", str(tmp_path / "run"), "--write"])
    tool.main(["--doc", str(path), "--results", str(tmp_path / "run")])
    assert path.read_text() == doc
    with pytest.raises(SystemExit) as exited:
        tool.main(["--doc", str(path), "--results", str(tmp_path / "none")])
    assert "no fault-matrix results" in str(exited.value.code)


def test_the_doc_has_the_table_markers() -> None:
    tool.table_of((ROOT / "docs" / "reliability.md").read_text(encoding="utf-8"))


def test_each_pytest_xdist_worker_writes_its_own_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.reliability import results_file

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert results_file("build/reliability/default-py3.11.json") == Path("build/reliability/default-py3.11.json")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert results_file("build/reliability/default-py3.11.json") == Path("build/reliability/default-py3.11.gw1.json")
