"""Repartition and check logic that needs no JVM: log rewrites, schema files, the copy, refusals, settings."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.checkpoint import synthetic
from tests.helpers import write_config
from tests.unit.test_state_corpus import CORPUS
from tidemark.cli.main import main
from tidemark.compat import UTC
from tidemark.config import load_config
from tidemark.config.model import PROVIDER_CLASSES, StateStoreKind
from tidemark.errors import CheckpointError, CheckpointLocked, StorageError, UsageError
from tidemark.evolve.check import _check_settings, _Findings
from tidemark.evolve.partitioning import partition_key, store_moves
from tidemark.evolve.rehearse import _forget_last_commit
from tidemark.evolve.repartition import FORMAT_VERSION_KEY, Engine, choose_engine, repartition_checkpoint
from tidemark.formats import (
    LOCK_FILE,
    Checkpoint,
    CommitEntry,
    LockInfo,
    MoveResult,
    OperatorFile,
    clone_without_state,
    helper_spec,
    is_store_data,
    operator_entries,
    parse_schema_file,
    record_unique_ids,
    relocate_schema_paths,
    repoint_schema_paths,
    rewrite_offset_conf,
    rewrite_operator_metadata,
    type_signature,
)
from tidemark.storage import open_storage

SPARK35 = Path(__file__).resolve().parents[1] / "fixtures" / "spark35"
PARTITIONS = "spark.sql.shuffle.partitions"
TWS_METADATA = "v2\n" + json.dumps(
    {
        "operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateInPandasExec"},
        "stateStoreInfo": [
            {
                "storeName": "default",
                "numColsPrefixKey": 0,
                "numPartitions": 3,
                "stateSchemaFilePaths": ["file:/old/place/state/0/_stateSchema/default/0_abc"],
            }
        ],
        "operatorPropertiesJson": json.dumps(
            {"timeMode": "EventTime", "stateVariables": [{"stateName": "seen", "stateVariableType": "ListState"}]}
        ),
    }
)


def _conf_checkpoint(root: Path, conf: dict[str, str], batches: int = 3, partitions: int = 2) -> Path:
    synthetic.simple(root, batches=batches, partitions=partitions)
    for b in range(batches):
        path = root / "offsets" / str(b)
        path.write_text(rewrite_offset_conf(path.read_text(), conf))
    return root


def test_offset_rewrite_changes_only_the_recorded_conf() -> None:
    text = 'v1\n{"batchWatermarkMs":5,"conf":{"spark.sql.shuffle.partitions":"3","a":"b"}}\n{"logOffset":4}\n-'
    new = rewrite_offset_conf(text, {PARTITIONS: "8"})
    lines = new.splitlines()
    assert lines[0] == "v1" and lines[2:] == ['{"logOffset":4}', "-"]
    meta = json.loads(lines[1])
    assert meta == {"batchWatermarkMs": 5, "conf": {PARTITIONS: "8", "a": "b"}}
    with pytest.raises(ValueError, match="offset log"):
        rewrite_offset_conf("garbage", {})


def test_operator_metadata_rewrite_sets_partitions_and_moves_schema_paths() -> None:
    new = rewrite_operator_metadata(TWS_METADATA, 8, "file:/new/ckpt/state/0/_stateSchema")
    parsed = OperatorFile.parse(new)
    assert parsed.version == 2 and parsed.name == "transformWithStateInPandasExec"
    assert parsed.stores[0].partitions == 8
    assert parsed.stores[0].schema_paths == ("file:/new/ckpt/state/0/_stateSchema/default/0_abc",)
    assert parsed.properties["timeMode"] == "EventTime"
    v1 = 'v1\n{"operatorInfo":{"operatorId":1,"operatorName":"dedupe"},"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":4}]}'  # noqa: E501
    assert OperatorFile.parse(rewrite_operator_metadata(v1, 2)).stores[0].partitions == 2


def test_schema_paths_relocate_below_a_new_checkpoint_root_and_keep_the_rest() -> None:
    moved = OperatorFile.parse(relocate_schema_paths(TWS_METADATA, "file:/copy/read-1"))
    assert moved.stores[0].schema_paths == ("file:/copy/read-1/state/0/_stateSchema/default/0_abc",)
    assert moved.stores[0].partitions == 3 and moved.properties["timeMode"] == "EventTime"
    # A checkpoint under a folder itself named state: only the checkpoint's own tail moves.
    nested = TWS_METADATA.replace("file:/old/place/", "wasbs://c@a.blob.core.windows.net/state/7/x/")
    again = OperatorFile.parse(relocate_schema_paths(nested, "file:/copy"))
    assert again.stores[0].schema_paths == ("file:/copy/state/0/_stateSchema/default/0_abc",)
    v1 = 'v1\n{"operatorInfo":{"operatorId":1,"operatorName":"dedupe"},"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":4}]}'  # noqa: E501
    assert relocate_schema_paths(v1, "file:/copy") == v1  # nothing to move: the same text, byte for byte
    with pytest.raises(ValueError, match="operator metadata"):
        relocate_schema_paths("garbage", "file:/copy")


@pytest.mark.parametrize(
    ("operator", "store", "expected"),
    [
        ("stateStoreSave", "default", {"kind": "all"}),
        ("dedupe", "default", {"kind": "all"}),
        ("sessionWindowStateStoreSaveExec", "default", {"kind": "drop_last", "n": 1}),
        ("symmetricHashJoin", "left-keyWithIndexToValue", {"kind": "drop_last", "n": 1}),
        ("symmetricHashJoin", "right-keyToNumValues", {"kind": "all"}),
        ("transformWithStateInPandasExec", "default", {"kind": "transform_with_state"}),
    ],
)
def test_partition_key_of_each_operator(operator: str, store: str, expected: dict[str, object]) -> None:
    assert partition_key(operator, store) == expected
    # Join state formats 3 and 4: the stores are column families of `default`, each placed as its store (the helper).
    families = partition_key("symmetricHashJoin", "default", column_families=True)
    assert families["kind"] == "join"
    assert families["families"] == {
        "left-keyToNumValues": {"kind": "all"},
        "right-keyToNumValues": {"kind": "all"},
        "left-keyWithIndexToValue": {"kind": "drop_last", "n": 1},  # join keys, then the value index
        "right-keyWithIndexToValue": {"kind": "drop_last", "n": 1},
        "left-keyWithTsToValues": {"kind": "drop_last", "n": 1},  # join keys, then __event_time (format 4)
        "right-keyWithTsToValues": {"kind": "drop_last", "n": 1},
        "left-tsWithKey": {"kind": "drop_last", "n": 1},
        "right-tsWithKey": {"kind": "drop_last", "n": 1},
    }


@pytest.mark.parametrize("version", ["4.2.1", "4.3.0"])
def test_join_state_format_4_tells_the_helper_its_families(version: str) -> None:
    # What the writer must know to recreate the families as Spark did: all four hold several values per key, and the
    # time index is internal (the recorded RocksDB checkpoint's columnFamilyTypeMap says so).
    checkpoint = Checkpoint.open(str(CORPUS / f"spark-{version}" / "rocksdb_join_v4" / "checkpoint"))
    [move] = store_moves(checkpoint, operator_entries(checkpoint))
    assert (move.store, move.column_families) == ("default", True)
    assert {"left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey"} <= set(
        move.list_families
    )
    assert set(move.internal_families) == {"left-tsWithKey", "right-tsWithKey"}
    metadata = (CORPUS / f"spark-{version}" / "rocksdb_join_v4" / "checkpoint" / "state/0/0").glob("*.zip")
    recorded = {name for zipped in metadata for name in _internal_families(zipped)}
    assert recorded == set(move.internal_families)
    spec = helper_spec(
        move,
        old_state_root="/o",
        new_state_root=None,
        version=4,
        old_partitions=2,
        new_partitions=3,
        read_conf={},
        write_conf={},
    )
    assert spec["internalColumnFamilies"] == sorted(move.internal_families)
    assert spec["partitionKey"]["families"]["left-tsWithKey"] == {"kind": "drop_last", "n": 1}


def _internal_families(zipped: Path) -> set[str]:
    """The families a RocksDB snapshot's metadata records as internal (Spark's columnFamilyTypeMap)."""
    import zipfile

    with zipfile.ZipFile(zipped) as archive:
        text = archive.read("metadata").decode("utf-8")
    metadata = json.loads(text.splitlines()[1])
    return {name for name, internal in metadata.get("columnFamilyTypeMap", {}).items() if internal}


def test_helper_result_parses_and_counts_misplaced_rows() -> None:
    result = MoveResult.from_json(
        json.dumps(
            {
                "operatorId": 0,
                "storeName": "default",
                "families": ["default"],
                "read": [
                    {
                        "partition": 1,
                        "misplaced": 2,
                        "misplacedSample": "x",
                        "families": [{"name": "default", "rows": 5, "bytes": 50}],
                    },
                    {"partition": 0, "misplaced": 0, "families": [{"name": "default", "rows": 3, "bytes": 30}]},
                ],
                "newPartitionRows": [4, 4],
            }
        )
    )
    assert [p.partition for p in result.read] == [0, 1]
    assert [p.rows for p in result.read] == [3, 5] and result.read[1].bytes == 50
    assert result.misplaced == 2 and result.new_rows == (4, 4)


def _utf(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def _chunks(text: str) -> bytes:
    return struct.pack(">i", 1) + _utf(text)


KEY = {"type": "struct", "fields": [{"name": "user", "type": "string", "nullable": True, "metadata": {}}]}
VALUE = {"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": True, "metadata": {}}]}


def test_schema_files_v2_and_v3_parse() -> None:
    v2 = _utf("v2") + _chunks(json.dumps(KEY)) + _chunks(json.dumps(VALUE))
    [family] = parse_schema_file(v2)
    assert (
        family.name == "default" and type_signature(family.key) == "string" and type_signature(family.value) == "long"
    )
    encoder = {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"}
    v3 = _utf("v3") + struct.pack(">i", 1) + _utf("count") + struct.pack(">h", 0) + _chunks(json.dumps(KEY))
    v3 += struct.pack(">h", 0) + _chunks(json.dumps(VALUE)) + _chunks(json.dumps(encoder)) + _chunks("{    }")
    [family] = parse_schema_file(v3)
    assert family.name == "count" and family.encoder == encoder and family.value[0].name == "n"
    with pytest.raises(ValueError, match="version"):
        parse_schema_file(_utf("v9"))


def test_clone_copies_all_but_store_data_and_rewrites_counts(tmp_path: Path) -> None:
    source = _conf_checkpoint(tmp_path / "ckpt", {PARTITIONS: "2"})
    (source / LOCK_FILE).parent.mkdir(parents=True, exist_ok=True)
    (source / LOCK_FILE).write_text("{}")
    target = tmp_path / "copy"
    result = clone_without_state(Checkpoint.open(str(source)), open_storage(str(target)), {PARTITIONS: "8"}, 8)
    copy = Checkpoint.open(str(target))
    assert copy.offset(2).conf[PARTITIONS] == "8" and copy.commit_batches() == [0, 1, 2]
    assert not (target / "offsets" / ".2.crc").exists() and (target / "commits" / ".2.crc").exists()
    assert (target / "state" / "0" / "0" / "_metadata" / "schema").exists()  # partition 0 keeps the schema
    assert not list((target / "state").rglob("*.delta")) and not (target / LOCK_FILE).exists()
    meta = OperatorFile.parse((target / "state" / "0" / "_metadata" / "metadata").read_text())
    assert meta.stores[0].partitions == 8
    assert "offsets/0" in result.rewritten and "state/0/_metadata/metadata" in result.rewritten
    assert is_store_data("state/0/1/_metadata/schema") and not is_store_data("state/0/0/left-x/_metadata/schema")


def test_schema_paths_follow_the_checkpoint_to_its_final_place(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    (staging / "state" / "0" / "_metadata" / "v2").mkdir(parents=True)
    (staging / "state" / "0" / "_metadata" / "v2" / "0").write_text(TWS_METADATA)
    final = tmp_path / "final"
    assert repoint_schema_paths(open_storage(str(staging)), 8, open_storage(str(final))) == ["state/0/_metadata/v2/0"]
    parsed = OperatorFile.parse((staging / "state" / "0" / "_metadata" / "v2" / "0").read_text())
    assert parsed.stores[0].schema_paths == (f"file:{final}/state/0/_stateSchema/default/0_abc",)


def test_a_v2_commit_names_the_new_partitions_files(tmp_path: Path) -> None:
    """Checkpoint format v2: the ids of a store per partition (a join's four stores in Spark's order), and the
    latest commit rewritten with the new partitions' ids, the rest of it and its version line as they were."""
    join = [[f"{side}{p}" for side in ("lk", "lv", "rk", "rv")] for p in range(2)]
    text = "v2\n" + json.dumps({"nextBatchWatermarkMs": 7, "stateUniqueIds": {"0": [["a"], ["b"]], "1": join}})
    entry = CommitEntry.parse(3, text)
    assert entry.store_unique_ids(0, 0) == ["a", "b"]
    assert entry.store_unique_ids(1, 3) == ["rv0", "rv1"]
    assert entry.store_unique_ids(1, 4) is None and entry.store_unique_ids(2, 0) is None
    root = tmp_path / "ckpt"
    (root / "commits").mkdir(parents=True)
    (root / "commits" / "3").write_text(text)
    (root / "commits" / ".3.crc").write_bytes(b"stale")
    record_unique_ids(open_storage(str(root)), 3, {0: [["x"], ["y"], ["z"]]})
    rewritten = CommitEntry.parse(3, (root / "commits" / "3").read_text())
    assert rewritten.log_version == 2 and rewritten.next_watermark_ms == 7
    assert rewritten.state_unique_ids == {0: [["x"], ["y"], ["z"]], 1: join}
    assert not (root / "commits" / ".3.crc").exists()  # Hadoop would check the new bytes against it
    (root / "commits" / "4").write_text('v1\n{"nextBatchWatermarkMs":7}')
    with pytest.raises(CheckpointError, match="names no state files by unique id"):
        record_unique_ids(open_storage(str(root)), 4, {0: [["x"]]})


def test_repartition_refuses_a_live_query(tmp_path: Path) -> None:
    root = _conf_checkpoint(tmp_path / "ckpt", {PARTITIONS: "2"})
    now = datetime.now(tz=UTC)
    lock = LockInfo(os.getpid(), socket.gethostname(), "run-1", now, now, 10.0)
    (root / LOCK_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / LOCK_FILE).write_text(lock.to_json())
    with pytest.raises(CheckpointLocked, match="stop that run first"):
        repartition_checkpoint(str(root), 4)


def test_repartition_refuses_what_it_cannot_rewrite(tmp_path: Path) -> None:
    same = _conf_checkpoint(tmp_path / "same", {PARTITIONS: "2"})
    with pytest.raises(UsageError, match="already has 2 shuffle partitions"):
        repartition_checkpoint(str(same), 2)
    v2 = _conf_checkpoint(tmp_path / "v2", {PARTITIONS: "2"})
    synthetic.commits(v2, range(3), unique_ids={2: {0: [["a"], ["b"]]}})
    with pytest.raises(UsageError, match="is RocksDB only"):
        repartition_checkpoint(str(v2), 4, state_store="hdfs")
    with pytest.raises(CheckpointError, match="no state metadata"):
        repartition_checkpoint(str(SPARK35 / "hdfs_window"), 4)
    with pytest.raises(StorageError, match="no AWS credentials found"):  # remote checkpoints are taken (#39)
        repartition_checkpoint("s3a://bucket/ckpt", 4)
    with pytest.raises(UsageError, match="at least 1"):
        repartition_checkpoint(str(same), 0)
    assert main(["state", "repartition", str(same), "--partitions", "2"]) == 2
    with pytest.raises(UsageError, match="--state-store must be one of rocksdb, hdfs"):
        repartition_checkpoint(str(same), 4, state_store="redis")
    assert main(["state", "repartition", str(same), "--partitions", "4", "--state-store", "redis"]) == 2


def test_settings_spark_keeps_from_the_checkpoint(tmp_path: Path) -> None:
    provider = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    root = _conf_checkpoint(
        tmp_path / "checkpoint", {PARTITIONS: "3", "spark.sql.streaming.stateStore.providerClass": provider}
    )
    (tmp_path / "landing").mkdir()
    # Unset, the state store follows the checkpoint (issue 29): only a config that sets another one differs.
    unset = load_config(write_config(tmp_path, spark={"shuffle_partitions": 8}))
    found = _Findings(frozenset())
    _check_settings(Checkpoint.open(str(root)), 2, unset, found)
    assert {p.code for p in found.problems} == {"SHUFFLE_PARTITIONS"}
    assert "state store hdfs" in found.compared
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 8}, checkpoint={"state_store": "rocksdb"}))
    found = _Findings(frozenset())
    _check_settings(Checkpoint.open(str(root)), 2, config, found)
    problems = {p.code: p for p in found.problems}
    assert set(problems) == {"SHUFFLE_PARTITIONS", "STATE_STORE_PROVIDER"}
    assert f"tidemark state repartition {root} --partitions 8 --apply" in problems["SHUFFLE_PARTITIONS"].fix
    assert "--state-store rocksdb" in problems["STATE_STORE_PROVIDER"].fix
    assert "checkpoint format v1" in found.compared


def test_an_offset_log_keeps_its_version_whatever_the_config_asks(tmp_path: Path) -> None:
    # Spark 4.2.1 and 4.3.0 write no batch that upgrades a v1 offset log (tried by hand, docs/compatibility.md):
    # formatVersion=2 on a v1 checkpoint is ignored, source evolution on one is refused at start.
    v1 = _conf_checkpoint(tmp_path / "v1", {PARTITIONS: "2"})
    v2 = Path(shutil.copytree(CORPUS / "spark-4.2.1" / "rocksdb_offsets_v2_window" / "checkpoint", tmp_path / "v2"))
    (tmp_path / "landing").mkdir()
    config = load_config(write_config(tmp_path, spark={"shuffle_partitions": 2}))
    log, evolution = (
        "spark.sql.streaming.offsetLog.formatVersion",
        "spark.sql.streaming.queryEvolution.enableSourceEvolution",
    )
    cases: list[tuple[Path, dict[str, Any], str | None, str | None]] = [
        (v1, {}, None, "offset log v1"),
        (v1, {log: 2}, "keeps writing v1", None),
        (v1, {evolution: True}, "CANNOT_ENABLE_ON_EXISTING_CHECKPOINT", None),
        (v2, {log: 2}, None, "offset log v2"),
        (v2, {evolution: True}, None, "offset log v2"),
    ]
    for root, conf, problem, same in cases:
        asking = config.model_copy(update={"spark": config.spark.model_copy(update={"conf": conf})})
        found = _Findings(frozenset())
        checkpoint = Checkpoint.open(str(root))
        _check_settings(checkpoint, checkpoint.commit_batches()[-1], asking, found)
        codes = {p.code: p for p in found.problems if p.code == "OFFSET_LOG"}
        if problem is None:
            assert not codes and same in found.compared, (conf, found.problems)
        else:
            assert problem in codes["OFFSET_LOG"].message and "new checkpoint" in codes["OFFSET_LOG"].fix, conf


def test_rehearsal_copy_forgets_the_last_commit_and_its_state(tmp_path: Path) -> None:
    root = synthetic.simple(tmp_path / "ckpt", batches=4, partitions=1)
    _forget_last_commit(root, 3)
    assert Checkpoint.open(str(root)).commit_batches() == [0, 1, 2]
    left = sorted(p.name for p in (root / "state" / "0" / "0").iterdir() if p.is_file())
    assert "4.delta" not in left and ".4.delta.crc" not in left and "4.delta.crc" not in left
    assert "3.delta" in left  # the state the re-run batch loads


ROCKSDB = PROVIDER_CLASSES[StateStoreKind.ROCKSDB]
HDFS = PROVIDER_CLASSES[StateStoreKind.HDFS]


@pytest.mark.parametrize(
    ("spark", "apply", "to", "provider", "new_provider", "conf", "expected"),
    [
        # tidemark's writer wherever it runs: Spark's leaves a gap in a file sink's log (the 4.2 smoke run)
        ("4.2.0", True, None, ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),
        ("4.3.0", True, None, ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),
        ("4.1.1", True, None, ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),  # Spark's arrived in 4.2
        ("3.5.7", True, None, ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),
        ("4.2.0", False, None, ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),  # a dry run: tidemark's plan only
        ("4.2.0", True, "/elsewhere", ROCKSDB, ROCKSDB, {}, Engine.TIDEMARK),  # Spark's writes in place
        ("4.2.0", True, None, HDFS, HDFS, {}, Engine.TIDEMARK),  # Spark's refuses HDFS-backed state
        ("4.2.0", True, None, ROCKSDB, HDFS, {}, Engine.TIDEMARK),  # Spark's keeps the provider
        (
            "4.2.0",
            True,
            None,
            ROCKSDB,
            ROCKSDB,
            {FORMAT_VERSION_KEY: "2"},
            Engine.TIDEMARK,
        ),
    ],
)
def test_auto_engine_is_tidemarks_writer_on_every_line(
    spark: str, apply: bool, to: str | None, provider: str, new_provider: str, conf: dict[str, str], expected: Engine
) -> None:
    chosen = choose_engine(
        Engine.AUTO, apply=apply, to=to, provider=provider, new_provider=new_provider, conf=conf, spark_version=spark
    )
    assert chosen is expected


def test_spark_engine_refused_in_one_line_naming_why() -> None:
    with pytest.raises(UsageError, match=r"--engine spark cannot repartition this checkpoint: .*4\.2"):
        choose_engine(
            Engine.SPARK, apply=True, to=None, provider=ROCKSDB, new_provider=ROCKSDB, conf={}, spark_version="3.5.7"
        )
    with pytest.raises(UsageError, match="RocksDB state only"):
        choose_engine(
            Engine.SPARK, apply=True, to=None, provider=HDFS, new_provider=HDFS, conf={}, spark_version="4.2.0"
        )
    with pytest.raises(UsageError, match="join state format 4 that its own reader cannot read"):
        choose_engine(
            Engine.SPARK,
            apply=True,
            to=None,
            provider=ROCKSDB,
            new_provider=ROCKSDB,
            conf={},
            spark_version="4.2.1",
            join_format_4=True,
        )
    assert (
        choose_engine(
            Engine.TIDEMARK, apply=True, to=None, provider=ROCKSDB, new_provider=ROCKSDB, conf={}, spark_version="4.2.0"
        )
        is Engine.TIDEMARK
    )
