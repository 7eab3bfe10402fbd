"""Config loading: defaults, path resolution, and one-line errors that name the key."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import AggregationKind, StateStoreKind, load_config
from tidemark.config.model import ROCKSDB_PROVIDER
from tidemark.context import PipelineContext
from tidemark.errors import ConfigError


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, trigger={"mode": "processing-time", "max_duration": "4h"}))
    assert config.spark.master == "local[2]"
    assert config.checkpoint.state_store is StateStoreKind.ROCKSDB
    assert config.checkpoint.changelog is True
    assert config.event_time.watermark == timedelta(minutes=10)
    assert config.trigger.max_duration == timedelta(hours=4)
    assert config.aggregation.kind is AggregationKind.WINDOW
    assert config.partition_by == ["windowStart"]
    assert config.source.path == str(tmp_path / "landing")
    assert config.checkpoint.location == str(tmp_path / "checkpoint")
    conf = config.spark_conf()
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.streaming.minBatchesToRetain"] == "20"
    assert conf["spark.sql.shuffle.partitions"] == "2"


def test_user_spark_conf_wins(tmp_path: Path) -> None:
    path = write_config(tmp_path, checkpoint={"state_store": "hdfs"})
    path.write_text(path.read_text() + '\n[spark.conf]\n"spark.sql.streaming.minBatchesToRetain" = 7\n')
    conf = load_config(path).spark_conf()
    assert conf["spark.sql.streaming.minBatchesToRetain"] == "7"
    assert "HDFSBacked" in conf["spark.sql.streaming.stateStore.providerClass"]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"source": {"pathh": "x"}}, "unknown key 'source.pathh'"),
        ({"source": {"connection_string": "Endpoint=sb://x"}}, "with connection_string_env, or a file with"),
        ({"checkpoint": {"state_store": "leveldb"}}, "'checkpoint.state_store'"),
        ({"event_time": {"watermark": "ten minutes"}}, "cannot read duration 'ten minutes'"),
        ({"aggregation": {"window": None}}, "aggregation.window is required"),
        ({"aggregation": {"slide": "1 hour"}}, "slide must be positive and not longer"),
        ({"aggregation": {"key": ["user name"]}}, "is not a plain column name"),
        ({"sink": {"writers": 0}}, "'sink.writers'"),
        ({"sink": {"path": None, "table": "events"}}, "sink.table is for format 'delta'"),
        ({"sink": {"format": "delta", "table": "events"}}, "give sink.path or sink.table, not both"),
        ({"sink": {"format": "delta", "path": None, "table": "db.my events"}}, "is not a table name"),
        ({"sink": {"format": "delta", "path": None}}, "sink.path (or sink.table, a catalog table) is required"),
        (
            {"aggregation": {"kind": "custom", "processor": "m:P", "window": None}, "sink": {"writers": 2}},
            "sink.writers applies to window and session aggregations",
        ),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, overrides: dict[str, dict[str, object]], fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_config(write_config(tmp_path, **overrides))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
    assert "sb://x" not in str(info.value)  # a secret put in the TOML is never echoed


def test_cli_bad_config_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, sink={"partitionby": ["x"]})
    code = main(["run", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert "unknown key 'sink.partitionby'" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[pipeline\nname = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_error_text_in_brackets_survives_rendering(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 1
    assert "[monitor] dir" in capsys.readouterr().err


def test_output_writers_follow_the_task_slots_unless_set(tmp_path: Path) -> None:
    from tidemark.pipeline.sinks import output_writers

    assert output_writers(PipelineContext.of(load_config(write_config(tmp_path))), task_slots=8) == 8
    assert (
        output_writers(PipelineContext.of(load_config(write_config(tmp_path, sink={"writers": 3}))), task_slots=8) == 3
    )
    custom = {"kind": "custom", "processor": "m:P", "window": None}
    assert (
        output_writers(PipelineContext.of(load_config(write_config(tmp_path, aggregation=custom))), task_slots=8)
        is None
    )
    # Under dynamic allocation the slots are unknown at start: Spark's plan, unless writers is set.
    dynamic = write_config(tmp_path)
    dynamic.write_text(dynamic.read_text() + '\n[spark.conf]\n"spark.dynamicAllocation.enabled" = true\n')
    assert output_writers(PipelineContext.of(load_config(dynamic)), task_slots=8) is None
    console = {"format": "console", "path": None}
    assert output_writers(PipelineContext.of(load_config(write_config(tmp_path, sink=console))), task_slots=8) is None


def test_a_delta_table_name_is_a_sink_with_no_path_until_a_run_records_it(tmp_path: Path) -> None:
    from tidemark.errors import InputError
    from tidemark.formats import SinkTransaction, write_sink_transaction
    from tidemark.recovery.archive import pipeline_locations
    from tidemark.sinks import sink_of
    from tidemark.storage import open_storage

    config = load_config(write_config(tmp_path, sink={"format": "delta", "path": None, "table": "lake.`events 2`"}))
    assert config.sink.table == "lake.`events 2`"
    sink = sink_of(config)
    assert sink.path is None and "start the pipeline once" in (sink.unresolved() or "")
    with pytest.raises(InputError, match=re.escape("lake.`events 2` is not known yet")):
        pipeline_locations(config)
    checkpoint = open_storage(config.checkpoint.location)
    write_sink_transaction(checkpoint, SinkTransaction("tidemark:x", 0, str(tmp_path / "wh" / "events")))
    resolved = sink_of(config)
    assert resolved.path == str(tmp_path / "wh" / "events") and resolved.unresolved() is None
    assert pipeline_locations(config).sink.key == str(tmp_path / "wh" / "events")
