"""State inspection logic that needs no JVM: checkpoint logs, folders, metadata properties, options, CLI checks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.errors import CheckpointError, UsageError
from tidemark.formats import Checkpoint, OperatorMetadata
from tidemark.statestore.logs import operator_folders
from tidemark.statestore.metadata import (
    StateVariable,
    StoreInfo,
    legacy_hint,
    parse_operator_properties,
)
from tidemark.statestore.reader import FORMAT_VERSION_KEY, ReadTarget, reader_options, session_conf, targets_of
from tidemark.statestore.show import choose_target, plain
from tidemark.statestore.stats import skew_of

TWS_PROPS = json.dumps(
    {
        "timeMode": "EventTime",
        "outputMode": "Update",
        "stateVariables": [
            {"stateName": "last", "stateVariableType": "ValueState", "ttlEnabled": False},
            {"stateName": "count", "stateVariableType": "ValueState", "ttlEnabled": False},
            {"stateName": "$eventTimers_keyToTimestamp", "stateVariableType": "TimerState", "ttlEnabled": False},
        ],
    }
)


def _store(name: str = "transformWithStateInPandasExec", props: str | None = TWS_PROPS, **kw: object) -> StoreInfo:
    time_mode, variables, timers = parse_operator_properties(props)
    fields: dict[str, object] = {
        "operator_id": 0,
        "operator_name": name,
        "store": "default",
        "num_partitions": 2,
        "min_batch": 0,
        "max_batch": 2,
        "time_mode": time_mode,
        "variables": variables,
        "has_timers": timers,
        "has_changelog": True,
        "disk_bytes": 0,
        "from_metadata": True,
    }
    fields.update(kw)
    return StoreInfo(**fields)  # type: ignore[arg-type]


def _checkpoint(tmp_path: Path, commit_version: int = 1) -> Path:
    root = tmp_path / "ck"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch in (0, 1):
        conf = {"spark.sql.shuffle.partitions": "2"}
        offsets = {"batchWatermarkMs": 1000 * batch, "batchTimestampMs": 5, "conf": conf}
        (root / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(offsets)}\n{{}}\n")
        (root / "commits" / str(batch)).write_text(f"v{commit_version}\n" + json.dumps({"nextBatchWatermarkMs": 7}))
    (root / "commits" / ".1.crc").write_text("x")
    for part in (0, 1):
        folder = root / "state" / "0" / str(part)
        (folder / "left-keyToNumValues").mkdir(parents=True)
        (folder / "left-keyToNumValues" / "2.changelog").write_bytes(b"12345")
        (folder / "_metadata").mkdir()
        (folder / ".2.changelog.crc").write_bytes(b"123")
    return root


def test_corrupt_commit_is_one_clear_error(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path)
    (root / "commits" / "1").write_text("garbage")
    with pytest.raises(CheckpointError, match="not a valid Spark commit log entry"):
        Checkpoint.open(str(root)).commit(1)


def test_checkpoint_folders(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path)
    checkpoint = Checkpoint.open(f"file://{root}")
    checkpoint.require()
    assert checkpoint.store.location.key == str(root)
    assert checkpoint.latest_committed_batch() == 1
    assert checkpoint.commit(1).next_watermark_ms == 7
    (root / "state" / "5" / "0" / "_metadata").mkdir(parents=True)  # left behind by Spark's reader
    (folder,) = operator_folders(Checkpoint.open(str(root)))
    assert folder.partitions == (0, 1)
    assert folder.stores == ("left-keyToNumValues",)
    assert folder.has_changelog and not folder.has_operator_metadata
    assert folder.disk_bytes == 10  # .crc files are not state
    assert session_conf(checkpoint) == {}
    v2 = _checkpoint(tmp_path / "v2", commit_version=2)
    assert session_conf(Checkpoint.open(str(v2))) == {FORMAT_VERSION_KEY: "2"}


def test_missing_or_empty_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        Checkpoint.open(str(tmp_path / "nope")).require()
    (tmp_path / "other").write_text("x")
    with pytest.raises(CheckpointError, match="not a streaming checkpoint"):
        Checkpoint.open(str(tmp_path)).require()
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}")
    with pytest.raises(CheckpointError, match="no committed batch"):
        Checkpoint.open(str(tmp_path)).latest_committed_batch()


def test_operator_properties_keep_user_variables_and_note_timers() -> None:
    time_mode, variables, timers = parse_operator_properties(TWS_PROPS)
    assert time_mode == "EventTime" and timers
    assert variables == (StateVariable("last", "ValueState", False), StateVariable("count", "ValueState", False))
    assert parse_operator_properties(None) == (None, (), False)
    assert parse_operator_properties("not json") == (None, (), False)


def test_targets_and_options() -> None:
    tws = _store()
    targets = targets_of(tws)
    assert [t.label for t in targets] == ["last", "count", "$timers"]
    assert reader_options(targets[0], 3) == {"operatorId": "0", "stateVarName": "last", "batchId": "3"}
    assert reader_options(targets[2]) == {"operatorId": "0", "readRegisteredTimers": "true"}
    assert [t.label for t in targets_of(tws, include_timers=False)] == ["last", "count"]
    plain_store = _store("stateStoreSave", None)
    assert targets_of(plain_store) == [ReadTarget(0, "default")]
    assert reader_options(ReadTarget(1, "left-keyToNumValues")) == {
        "operatorId": "1",
        "storeName": "left-keyToNumValues",
    }


def test_choose_target() -> None:
    stores = [_store(), _store("stateStoreSave", None, operator_id=1)]
    with pytest.raises(UsageError, match="several stateful operators"):
        choose_target(stores, None, None)
    assert choose_target(stores, 0, None).label == "last"
    assert choose_target(stores, 0, "$timers").timers
    assert choose_target(stores, 1, None) == ReadTarget(1, "default")
    with pytest.raises(UsageError, match="choose one of last, count, \\$timers"):
        choose_target(stores, 0, "nope")
    with pytest.raises(UsageError, match="operators \\[0, 1\\]"):
        choose_target(stores, 7, None)
    legacy = [_store("unknown", None, from_metadata=False)]
    assert choose_target(legacy, None, "left-keyWithIndexToValue") == ReadTarget(0, "left-keyWithIndexToValue")
    assert "--operator 0 --store default" in legacy_hint(legacy[0])


def test_skew_is_max_over_median() -> None:
    assert skew_of([10, 2, 2, 2]) == (10, 2.0, 5.0)
    assert skew_of([0, 0, 3]) == (3, 0.0, None)
    assert skew_of([]) == (0, 0.0, None)


def test_plain_cells() -> None:
    import datetime as dt
    import decimal

    assert plain(dt.datetime(2024, 1, 1, tzinfo=dt.UTC)) == "2024-01-01T00:00:00+00:00"
    assert plain(decimal.Decimal("1.50")) == "1.50"
    assert plain(b"\x00\x01") == "AAE="
    assert plain(3) == 3


def test_cli_rejects_bad_flags_before_starting_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert main(["state", "show", str(tmp_path), "--json", "--csv", "x.csv"]) == 2
    assert "choose one of" in capsys.readouterr().err
    assert main(["state", "diff", str(tmp_path), "--from", "3", "--to", "2"]) == 2
    assert "earlier batch" in capsys.readouterr().err
    assert main(["state", "expired", str(tmp_path), "--limit", "-1"]) == 2
    assert main(["state", "--help"]) == 0
    assert "stats" in capsys.readouterr().out
    assert time.monotonic() - started < 10


def test_operator_metadata_files() -> None:
    v1 = OperatorMetadata.parse(
        'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
        '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
    )
    assert (v1.operator_id, v1.name, v1.properties) == (0, "stateStoreSave", None)
    assert v1.stores == (("default", 2),)
    body = {
        "operatorInfo": {"operatorId": 3, "operatorName": "transformWithStateInPandasExec"},
        "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 4}],
        "operatorPropertiesJson": TWS_PROPS,
    }
    v2 = OperatorMetadata.parse("v2\n" + json.dumps(body))
    assert v2.stores == (("default", 4),)
    assert parse_operator_properties(v2.properties)[0] == "EventTime"


def test_a_spark_failure_becomes_its_useful_line() -> None:
    from tidemark.statestore.reader import one_line

    task = Exception(
        "An error occurred while calling o88.collectToPython.\n: org.apache.spark.SparkException: Job aborted due to "
        "stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 3) "
        "(192.0.2.2 executor driver): java.io.EOFException: Error reading delta file 3.delta\n\tat org.apache..."
    )
    assert one_line(task) == "java.io.EOFException: Error reading delta file 3.delta"
    failed = Exception(
        "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in "
        "stage 3.0 (TID 3) (192.0.2.2 executor driver): java.io.EOFException: Error reading delta file\n\tat x"
    )
    assert one_line(failed) == "java.io.EOFException: Error reading delta file"
    assert "\n" not in one_line(Exception("a\nb" * 500)) and len(one_line(Exception("x" * 900))) == 300
