"""Spark's own state reader on a transformWithState checkpoint of the pre-release 4.0.0 layout (issue 40).

Spark 4.1's reader finds no schema in it (its operator metadata names one `stateSchemaFilePath`, its schema file
has no schema ids); tidemark hands the reader a private copy in the release layout, and the rows equal those it
reads from the release-layout original. The user's checkpoint is left byte for byte as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_adopt import listing
from tests.unit.test_schema_v3_layouts import CASE, _pre_release_copy
from tidemark.cli.main import main

pytestmark = pytest.mark.integration


def _rows(checkpoint: Path, store: str, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    capsys.readouterr()
    assert main(["state", "show", str(checkpoint), "--store", store, "--reader", "spark", "--json"]) == 0
    return sorted(json.loads(capsys.readouterr().out)["rows"], key=str)


def test_spark_reads_the_pre_release_layout_through_a_private_copy(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _pre_release_copy(tmp_path)
    before = listing(checkpoint)
    for store in ("count", "values", "per_minute"):
        rows = _rows(checkpoint, store, capsys)
        assert rows and rows == _rows(CASE / "checkpoint", store, capsys), store
    assert listing(checkpoint) == before
