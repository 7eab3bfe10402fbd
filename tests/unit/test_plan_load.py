"""Planner inputs: Spark conf and pipeline config, progress logs, the Spark REST API, and their precedence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tidemark.config.model import StateStoreKind
from tidemark.errors import InputError, UsageError
from tidemark.sizing.load import (
    ConfOverrides,
    LoadFlags,
    LogLoad,
    RestLoad,
    conf_from_spark,
    load_from_log,
    load_from_rest,
    resolve_conf,
    resolve_load,
    spark_memory,
)
from tidemark.sizing.memory import layout_for

MB = 1024 * 1024
GB = 1024 * MB
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"

CONFIG = """
[pipeline]
name = "clicks"
[spark]
master = "spark://host:7077"
executor_memory = "6g"
[spark.conf]
"spark.executor.instances" = 3
"spark.executor.cores" = 4
"spark.memory.fraction" = 0.7
"spark.executor.memoryOverhead" = "1g"
"spark.executor.pyspark.memory" = "512m"
"spark.memory.offHeap.enabled" = true
"spark.memory.offHeap.size" = "256m"
[source]
path = "in"
schema = "user STRING, ts STRING"
[event_time]
column = "ts"
[aggregation]
key = ["user"]
window = "10 minutes"
[sink]
path = "out"
[checkpoint]
location = "ckpt"
state_store = "rocksdb"
bounded_memory_mb = 700
[quarantine]
path = "bad"
"""


def test_spark_memory_plain_numbers_are_mib_and_units_are_binary() -> None:
    assert spark_memory("4096") == 4 * GB
    assert spark_memory("4g") == 4 * GB
    assert spark_memory("384m") == 384 * MB
    assert spark_memory("100", plain_unit=1) == 100


def test_conf_from_spark_in_cluster_mode() -> None:
    conf = conf_from_spark(
        {
            "spark.executor.memory": "8g",
            "spark.executor.cores": "2",
            "spark.cores.max": "10",
            "spark.memory.storageFraction": "0.3",
            "spark.executor.memoryOverheadFactor": "0.2",
        },
        "spark://host:7077",
    )
    assert conf.executor_memory_bytes == 8 * GB
    assert (conf.executors, conf.cores) == (5, 2)
    assert conf.storage_fraction == 0.3
    assert layout_for(conf).overhead_bytes == int(0.2 * 8 * GB)
    assert conf.state_store is StateStoreKind.HDFS


def test_local_mode_uses_the_driver_heap_as_the_only_executor() -> None:
    conf = conf_from_spark({"spark.driver.memory": "2g", "spark.executor.memory": "9g"}, "local[3]")
    assert (conf.executor_memory_bytes, conf.executors, conf.cores) == (2 * GB, 1, 3)


def test_bad_number_in_conf_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"spark\.memory\.fraction"):
        conf_from_spark({"spark.memory.fraction": "lots"})


def test_config_file_gives_every_setting(tmp_path: Path) -> None:
    path = tmp_path / "tidemark.toml"
    path.write_text(CONFIG, encoding="utf-8")
    from tidemark.config import load_config

    conf = resolve_conf(load_config(path), ConfOverrides())
    assert conf.executor_memory_bytes == 6 * GB
    assert (conf.executors, conf.cores) == (3, 4)
    assert conf.memory_fraction == 0.7
    assert conf.overhead_bytes == 1 * GB
    assert conf.pyspark_memory_bytes == 512 * MB
    assert conf.off_heap_bytes == 256 * MB
    assert conf.state_store is StateStoreKind.ROCKSDB
    assert conf.rocksdb_bounded_bytes == 700 * MB
    layout = layout_for(conf)
    assert layout.container_bytes == (6144 + 1024 + 512 + 256) * MB


def test_flags_override_the_config(tmp_path: Path) -> None:
    path = tmp_path / "tidemark.toml"
    path.write_text(CONFIG, encoding="utf-8")
    from tidemark.config import load_config

    overrides = ConfOverrides(executor_memory="3g", executors=7, state_store=StateStoreKind.HDFS)
    conf = resolve_conf(load_config(path), overrides)
    assert (conf.executor_memory_bytes, conf.executors, conf.cores) == (3 * GB, 7, 4)
    assert conf.state_store is StateStoreKind.HDFS


def test_without_config_spark_defaults_apply() -> None:
    conf = resolve_conf(None, ConfOverrides(cores=2))
    assert (conf.executor_memory_bytes, conf.executors, conf.cores) == (1 * GB, 1, 2)
    assert (conf.memory_fraction, conf.storage_fraction) == (0.6, 0.5)


def _progress_lines(name: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    return [line["progress"] for line in lines if line["type"] == "progress"]


def test_log_load_is_the_peak_state_memory_of_the_recorded_hdfs_run() -> None:
    progress = _progress_lines("hdfs.jsonl")
    expected = max(sum(op["memoryUsedBytes"] for op in p["stateOperators"]) for p in progress)  # type: ignore[attr-defined]
    load = load_from_log(FIXTURES / "hdfs.jsonl")
    assert load.state_bytes == expected
    assert load.batches == len(progress)
    assert load.state_store is StateStoreKind.HDFS
    assert load_from_log(FIXTURES / "rocksdb.jsonl").state_store is StateStoreKind.ROCKSDB


def test_log_without_state_is_an_input_error(tmp_path: Path) -> None:
    log = tmp_path / "stateless.jsonl"
    log.write_text(json.dumps({"type": "progress", "time": "2026-01-01T00:00:00.000Z", "progress": {"batchId": 0}}))
    with pytest.raises(InputError, match="no progress of a stateful query"):
        load_from_log(log)


def test_rest_load_from_a_saved_executors_answer() -> None:
    executors = json.loads((FIXTURES / "executors.json").read_text())
    driver = executors[0]
    load = load_from_rest(str(FIXTURES / "executors.json"))
    assert load.executors == 1
    assert load.peak_execution_bytes == driver["peakMemoryMetrics"]["OnHeapExecutionMemory"]
    assert load.cached_bytes == driver["memoryUsed"]


def test_model_unified_memory_matches_what_spark_reported_for_a_1g_driver() -> None:
    # executors.json was recorded from a local[2] session with spark.driver.memory=1g.
    load = load_from_rest(str(FIXTURES / "executors.json"))
    unified = layout_for(resolve_conf(None, ConfOverrides(executor_memory="1g"))).unified_bytes
    assert abs(load.spark_unified_bytes - unified) < 1


@pytest.fixture
def spark_ui() -> Iterator[str]:
    executors = [
        {"id": "driver", "memoryUsed": 5, "maxMemory": 10, "peakMemoryMetrics": {"OnHeapExecutionMemory": 999}},
        {"id": "1", "memoryUsed": 100, "maxMemory": 4000, "peakMemoryMetrics": {"OnHeapExecutionMemory": 300}},
        {"id": "2", "memoryUsed": 50, "maxMemory": 4000, "peakMemoryMetrics": {"OnHeapExecutionMemory": 200}},
        {"id": "3", "isActive": False, "memoryUsed": 7, "peakMemoryMetrics": {"OnHeapExecutionMemory": 70}},
    ]
    answers = {
        "/api/v1/applications": [{"id": "app-1"}],
        "/api/v1/applications/app-1/executors": executors,
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if self.path in answers else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_rest_load_from_a_live_ui_skips_the_driver_and_dead_executors(spark_ui: str) -> None:
    load = load_from_rest(spark_ui)
    assert (load.executors, load.peak_execution_bytes, load.cached_bytes) == (2, 500, 150)


def test_unreachable_ui_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot read the Spark REST API"):
        load_from_rest("http://127.0.0.1:9")


def test_flags_win_over_log_and_rest() -> None:
    log = LogLoad(batches=3, state_bytes=1000, peak_batch_id=2, state_rows=10, state_store=None)
    rest = RestLoad(executors=1, peak_execution_bytes=500, cached_bytes=70, spark_unified_bytes=0)
    load = resolve_load(LoadFlags(shuffle_bytes="2k", sort_bytes="1m"), log, rest)
    assert (load.state_bytes, load.shuffle_bytes, load.sort_bytes, load.cached_bytes) == (1000, 2048, MB, 70)
    assert load.origin["shuffle_bytes"] == "flag"
    assert load.origin["state_bytes"].startswith("progress log")


def test_bad_size_flag_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot read size"):
        resolve_load(LoadFlags(state_bytes="lots"))


@pytest.mark.parametrize(("master", "cores"), [("local", 1), ("local[4]", 4), ("local[2, 3]", 2)])
def test_local_masters_give_the_thread_count_as_cores(master: str, cores: int) -> None:
    conf = conf_from_spark({}, master)
    assert (conf.executor_memory_bytes, conf.executors, conf.cores) == (GB, 1, cores)
