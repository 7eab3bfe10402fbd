"""A global `limit` and an aggregation without grouping keys keep their state in partition 0 alone (issue 40).

Spark plans both with an AllTuples distribution (one partition), while the operator metadata and the recorded
spark.sql.shuffle.partitions still say N. Such a checkpoint restarts; `checkpoint inspect` must not call it broken,
and both state readers must read the one row. A keyed aggregation that really lost a partition is still an error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tidemark.cli.main import main

pytestmark = pytest.mark.integration
SCHEMA = "k STRING, v INT"
LIMIT = 7


def _input(folder: Path) -> pd.DataFrame:
    folder.mkdir()
    rows = [{"k": f"u{j % 5}", "v": j + 100 * i} for i in range(3) for j in range(20)]
    for i in range(3):
        (folder / f"f{i}.json").write_text("\n".join(json.dumps(r) for r in rows[20 * i : 20 * (i + 1)]) + "\n")
    return pd.DataFrame(rows)


def _query(spark: Any, landing: Path, checkpoint: Path, build: Any, mode: str, sink: Path) -> None:
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
    writer = build(frame).writeStream.outputMode(mode).option("checkpointLocation", str(checkpoint))
    if mode == "append":
        writer = writer.format("parquet").option("path", str(sink))
    else:
        writer = writer.format("memory").queryName(checkpoint.name.replace("-", "_"))
    writer.trigger(availableNow=True).start().awaitTermination()


def _state_rows(checkpoint: Path, reader: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["state", "show", str(checkpoint), "--reader", reader, "--json"]) == 0, capsys.readouterr().err
    shown = json.loads(capsys.readouterr().out)
    return [dict(zip(shown["columns"], row, strict=True)) for row in shown["rows"]]


def _findings(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["checkpoint", "inspect", str(checkpoint), "--json"])
    return code, [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]


def test_limit_and_global_aggregate_state_lives_in_one_partition(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.sql import functions as F

    events = _input(tmp_path / "landing")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        limit, total, keyed = tmp_path / "limit", tmp_path / "global-count", tmp_path / "keyed"
        _query(spark, tmp_path / "landing", limit, lambda d: d.limit(LIMIT), "append", tmp_path / "limit-out")
        _query(spark, tmp_path / "landing", total, lambda d: d.agg(F.count("*").alias("n")), "complete", tmp_path)
        by_key = lambda d: d.groupBy("k").agg(F.sum("v").alias("s"))  # noqa: E731
        _query(spark, tmp_path / "landing", keyed, by_key, "update", tmp_path)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    for checkpoint in (limit, total):
        assert sorted(p.name for p in (checkpoint / "state" / "0").iterdir() if p.name.isdigit()) == ["0"]
        assert _findings(checkpoint, capsys) == (0, [])

    # The one row, from both readers, against what the input says: the rows the limit let through, the count.
    for reader in ("spark", "files"):
        (limit_row,) = _state_rows(limit, reader, capsys)
        assert limit_row["value_value"] == min(LIMIT, len(events)) and limit_row["partition_id"] == 0
        (count_row,) = _state_rows(total, reader, capsys)
        assert count_row["value_count"] == len(events) and count_row["partition_id"] == 0
    capsys.readouterr()
    assert main(["state", "stats", str(limit), "--reader", "files", "--json"]) == 0
    (store,) = json.loads(capsys.readouterr().out)["operators"]
    assert store["rows"] == 1 and [p["id"] for p in store["partitions"]] == [0]

    # A keyed aggregation whose partition 1 is gone cannot restart: still an error.
    shutil.rmtree(keyed / "state" / "0" / "1")
    code, codes = _findings(keyed, capsys)
    assert code == 1 and "STATE_VERSION_MISSING" in codes
