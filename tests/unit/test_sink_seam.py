"""Issue #55: each sink connector is one package that answers for its own format. Outside a connector's package (and
the registry, sinks/__init__.py, and sinks/base.py's contract, and config/) nothing branches on which sink a
pipeline has: no `table is None` dialect, no isinstance or type check on a connector's class, no `SinkFormat`
member compared, no name of a connector's own on-disk format (`_spark_metadata`, `_delta_log`), and no import of a
connector's inner modules (only its facade)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tidemark

SRC = Path(tidemark.__file__).parent
CONNECTORS = {
    ("sinks", "parquet"): "_spark_metadata",
    ("sinks", "delta"): "_delta_log",
    ("sinks", "iceberg"): "version-hint.text",
}
# The registry and the contract, and the small connector that is one module.
SHARED = {("sinks", "__init__.py"), ("sinks", "base.py"), ("sinks", "audit.py"), ("sinks", "console.py")}

# A choice of behaviour by sink connector: the table-or-files dialect, a connector's class tested, its format
# member compared, the config's sink format read.
SINK_BRANCH = re.compile(
    r"\btable is (not )?None\b"
    r"|isinstance\(.*\b\w*(Parquet|Delta|Console|Iceberg)\w*\b"
    r"|type\(\w+\) is (not )?\w*(Parquet|Delta|Console|Iceberg)\w*"
    r"|SinkFormat\.\w+|sink\.format\b"
)


def _outside(parts: tuple[str, ...]) -> bool:
    """True for a module of no sink connector and not the sinks' registry or contract (config/ keeps the model)."""
    if parts[0] == "config" or parts[:2] in SHARED:
        return False
    return not any(parts[: len(package)] == package for package in CONNECTORS)


def _lines(pattern: re.Pattern[str], keep: object) -> list[str]:
    return [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if keep(path.relative_to(SRC).parts)  # type: ignore[operator]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_branch_on_the_sink_connector_outside_its_package() -> None:
    assert _lines(SINK_BRANCH, _outside) == []


@pytest.mark.parametrize("package", sorted(CONNECTORS), ids=lambda p: "/".join(p))
def test_only_a_connector_names_its_format_and_others_import_its_facade(package: tuple[str, ...]) -> None:
    """Its log folder's name and its inner modules are the connector's own: the rest asks its facade or the
    contract (a connector importing another's facade counts too)."""
    inner = re.compile(rf"tidemark\.{'.'.join(package)}\.\w+|{re.escape(CONNECTORS[package])}")

    def keep(parts: tuple[str, ...]) -> bool:
        return parts[: len(package)] != package

    assert _lines(inner, keep) == []


def test_no_connector_imports_another() -> None:
    """sinks/parquet and sinks/delta never import each other (the Delta sink once borrowed ParquetSink.writers)."""
    found = []
    for package in CONNECTORS:
        others = [p for p in CONNECTORS if p != package]
        pattern = re.compile("|".join(rf"tidemark\.{'.'.join(o)}\b" for o in others))
        found += _lines(pattern, lambda parts, package=package: parts[: len(package)] == package)
    assert found == []


def test_the_grep_sees_a_branch() -> None:
    """The patterns catch the branches they name (else the tests above could never fail)."""
    branches = [
        "if table is None:",
        "x = a if table is not None else b",
        "if isinstance(sink, DeltaSink):",
        "if type(sink) is ParquetSink:",
        "if config.sink.format is SinkFormat.DELTA:",
        "if isinstance(report, DeltaSinkReport):",
    ]
    assert all(SINK_BRANCH.search(b) for b in branches)
    assert not SINK_BRANCH.search("if sink.vouches(Tool.RECOVER):")
    assert _outside(("recovery", "plan.py")) and not _outside(("sinks", "delta", "sink.py"))
    assert not _outside(("sinks", "base.py")) and not _outside(("config", "model.py"))
