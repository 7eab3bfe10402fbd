"""A pipeline's context: its sink and source built once, its locations resolved once per tool, a refusal never kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.context import PipelineContext
from tidemark.errors import InputError, UsageError
from tidemark.sinks import Tool


def test_locations_are_resolved_once_per_tool(tmp_path: Path) -> None:
    pipeline = PipelineContext.of(load_config(write_config(tmp_path)))
    first = pipeline.locations(Tool.ROLLBACK)
    assert pipeline.locations(Tool.ROLLBACK) is first
    assert pipeline.locations(Tool.RECOVER) is not first  # each tool resolves (and refuses) for itself
    assert pipeline.locations(Tool.RECOVER) == first
    assert first.sink.key == str(tmp_path / "output")
    assert first.archive_base.key == str(tmp_path / ".tidemark-archive")


def test_a_refusal_is_raised_again_and_a_later_resolution_is_kept(tmp_path: Path) -> None:
    from tidemark.formats import SinkTransaction, write_sink_transaction
    from tidemark.storage import open_storage

    config = load_config(write_config(tmp_path, sink={"format": "delta", "path": None, "table": "lake.events"}))
    pipeline = PipelineContext.of(config)
    for _ in range(2):  # the unknown location is not remembered as an answer
        with pytest.raises(InputError, match=re.escape("lake.events is not known yet")):
            pipeline.locations()
    folder = tmp_path / "wh" / "events"
    write_sink_transaction(open_storage(config.checkpoint.location), SinkTransaction("tidemark:x", 0, str(folder)))
    assert pipeline.locations().sink.key == str(folder)
    console = PipelineContext.of(load_config(write_config(tmp_path, sink={"format": "console", "path": None})))
    for _ in range(2):
        with pytest.raises(UsageError, match="tidemark recover refused"):
            console.locations()
