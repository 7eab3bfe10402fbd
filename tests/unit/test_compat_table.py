"""tools/spark_lines/compat.py: the README's compatibility table against what the smoke runs proved."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _compat() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat", ROOT / "tools" / "spark_lines" / "compat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compat = _compat()
README = """intro
<!-- compat:begin -->
| Spark | Python | pipeline | custom |
|---|---|---|---|
| 4.1.1 (default) | 3.11 | yes | yes |
| 3.5.9 | 3.11 | yes | no (Spark 4.0+) |
<!-- compat:end -->
"""
REFUSAL = "transformWithStateInPandas needs Spark 4.0 or newer (installed: Spark 3.5.9)"


def _write(folder: Path, name: str, spark: str, features: dict[str, dict[str, str]]) -> None:
    body = {"target": name, "spark": spark, "python": "3.11.7", "features": features}
    (folder / f"{name}.json").write_text(json.dumps(body))


def _results(tmp_path: Path, custom_35: dict[str, str]) -> dict[tuple[str, str], dict[str, str]]:
    _write(tmp_path, "default-py3.11", "4.1.1", {"pipeline": {"outcome": "works"}, "custom": {"outcome": "works"}})
    _write(tmp_path, "3.5-py3.11", "3.5.9", {"pipeline": {"outcome": "works"}, "custom": custom_35})
    return compat.load_results(tmp_path)  # type: ignore[no-any-return]


def test_the_table_agrees_with_the_runs(tmp_path: Path) -> None:
    results = _results(tmp_path, {"outcome": "refused", "message": REFUSAL})
    assert compat.compare(README, results) == []


def test_a_claim_nobody_proved_and_a_proof_the_table_lacks(tmp_path: Path) -> None:
    failed = _results(tmp_path, {"outcome": "failed"})
    assert compat.compare(README, failed) == [
        "Spark 3.5.9 on Python 3.11: the table says custom = 'no (Spark 4.0+)', the smoke run: 'FAILED'"
    ]
    works = _results(tmp_path, {"outcome": "works"})
    assert compat.compare(README, works) == [
        "Spark 3.5.9 on Python 3.11: the table says custom = 'no (Spark 4.0+)', the smoke run: 'yes'"
    ]
    _write(tmp_path, "4.0-py3.11", "4.0.5", {"pipeline": {"outcome": "works"}, "recover": {"outcome": "works"}})
    extra = compat.load_results(tmp_path)
    assert "Spark 4.0.5 on Python 3.11: a smoke run proved it, but the table has no row for it" in compat.compare(
        README, extra
    )
    del extra[("4.1.1", "3.11")]
    del extra[("4.0.5", "3.11")]
    extra[("3.5.9", "3.11")]["recover"] = "yes"
    assert compat.compare(README, extra) == [
        "Spark 3.5.9 on Python 3.11: the table says custom = 'no (Spark 4.0+)', the smoke run: 'yes'",
        "Spark 3.5.9 on Python 3.11: the smoke run proved 'recover', but the table has no column for it",
        "Spark 4.1.1 on Python 3.11: the table has a row, but no smoke run proved it",
    ]


def test_the_readme_has_a_table_with_every_smoke_feature() -> None:
    features, table = compat.parse_table((ROOT / "README.md").read_text(encoding="utf-8"))
    smoke = "".join(f.read_text(encoding="utf-8") for f in sorted((ROOT / "tests" / "smoke").glob("test_*.py")))
    assert sorted(features) == sorted(
        line.split('"')[1] for line in smoke.splitlines() if line.startswith("@pytest.mark.smoke(")
    )
    assert ("4.1.1", "3.11") in table


def test_a_feature_left_out_of_a_run_is_a_dash_and_only_then(tmp_path: Path) -> None:
    readme = README.replace("| 3.5.9 | 3.11 | yes | no (Spark 4.0+) |", "| 3.5.9 | 3.11 | yes | - |")
    results = _results(tmp_path, {"outcome": "refused", "message": REFUSAL})
    # The run proved custom, the table says it was not run: claims less than proved.
    assert compat.compare(readme, results) == [
        "Spark 3.5.9 on Python 3.11: the table says custom = '-', the smoke run: 'no (Spark 4.0+)'"
    ]
    del results[("3.5.9", "3.11")]["custom"]  # the run left custom out (TIDEMARK_SMOKE_LEAVE_OUT)
    assert compat.compare(readme, results) == []
    assert compat.compare(README, results) == [
        "Spark 3.5.9 on Python 3.11: the table claims custom = 'no (Spark 4.0+)', no smoke test proved it"
    ]
