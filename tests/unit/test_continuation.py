"""Can a Spark continue a checkpoint: the corpus of checkpoints every Spark line wrote, against every line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.evolve.continuation import continuation
from tidemark.formats import Checkpoint
from tidemark.spark.lines import LINES, Feature

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


def _open(version: str, case: str) -> Checkpoint:
    return Checkpoint.open(str(CORPUS / f"spark-{version}" / case / "checkpoint"))


@pytest.mark.parametrize("line", sorted(LINES))
def test_every_line_continues_what_spark_3_wrote(line: str) -> None:
    for version in ("2.4.8", "3.1.3", "3.3.4", "3.5.9"):
        for case in sorted(p.name for p in (CORPUS / f"spark-{version}").iterdir() if p.is_dir()):
            verdict = continuation(_open(version, case), LINES[line].newest)
            assert verdict.ok, (version, case, verdict.missing)
            assert verdict.written_by == "a Spark before 4.0 (no operator metadata)"


def test_what_only_spark_4_reads_is_refused_on_3_5_in_one_line() -> None:
    v2 = continuation(_open("4.1.4", "rocksdb_v2_window"), "3.5.9")
    assert v2.missing == (
        "the checkpoint uses checkpoint format v2 (spark.sql.streaming.stateStore.checkpointFormatVersion) "
        "(commits/3 is a v2 commit): checkpoint format v2 (spark.sql.streaming.stateStore.checkpointFormatVersion) "
        "needs Spark 4.0 or newer (installed: Spark 3.5.9)",
    )
    tws = continuation(_open("4.0.5", "rocksdb_transform_with_state_in_pandas"), "3.5.9")
    assert len(tws.missing) == 1 and "operator 0 is transformWithStateInPandasExec" in tws.missing[0]
    assert "needs Spark 4.0 or newer (installed: Spark 3.5.9)" in tws.missing[0]
    # Both continue on the lines that read them.
    assert continuation(_open("4.1.4", "rocksdb_v2_window"), "4.0.5").ok
    assert continuation(_open("4.0.5", "rocksdb_transform_with_state_in_pandas"), "4.3.0").ok


def test_a_spark_4_window_checkpoint_is_not_refused_on_3_5() -> None:
    # Spark 3.5 ignores the operator metadata 4.x writes (tidemark's upgrade test continued such a pipeline).
    verdict = continuation(_open("4.1.4", "hdfs_window"), "3.5.9")
    assert verdict.ok
    assert verdict.written_by == "Spark 4.0 or newer (state/0/_metadata)"


def test_the_offset_log_v2_is_refused_before_spark_4_2_in_one_line() -> None:
    # Recorded by Spark 4.2.1 and 4.3.0 with spark.sql.streaming.offsetLog.formatVersion=2; Spark 4.1's reader
    # fails on it with INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION (tests/integration/test_state_corpus_spark.py).
    for version in ("4.2.1", "4.3.0"):
        case = _open(version, "rocksdb_offsets_v2_window")
        verdict = continuation(case, "4.1.1")
        assert verdict.missing == (
            "the checkpoint uses the offset log v2 (sources named; spark.sql.streaming.offsetLog.formatVersion = 2) "
            "(offsets/3 is a v2 offsets entry): the offset log v2 (sources named; "
            "spark.sql.streaming.offsetLog.formatVersion = 2) needs Spark 4.2 or newer (installed: Spark 4.1.1)",
        ), version
        assert not continuation(case, "3.5.9").ok
        assert continuation(case, "4.2.0").ok and continuation(case, "4.3.0").ok
    # The same query with the v1 log continues on 4.1.
    assert continuation(_open("4.2.1", "rocksdb_changelog_window"), "4.1.1").ok


def test_the_commit_log_v3_is_refused_before_spark_4_2_and_is_not_checkpoint_format_2() -> None:
    # Recorded by Spark 4.2.1 and 4.3.0 with source and sink evolution on (a named source and sink): commits v3.
    for version in ("4.2.1", "4.3.0"):
        case = _open(version, "rocksdb_commits_v3_window")
        verdict = continuation(case, "4.1.1")
        feature = "the commit log v3 (sinks named; spark.sql.streaming.queryEvolution.enableSinkEvolution)"
        assert [line for line in verdict.missing if "commit log v3" in line] == [
            f"the checkpoint uses {feature} (commits/3 is a v3 commit): {feature} needs Spark 4.2 or newer "
            "(installed: Spark 4.1.1)"
        ], version
        # a v3 commit without stateUniqueIds is checkpoint format 1: 4.0 is not what it needs
        assert Feature.CHECKPOINT_FORMAT_V2 not in {f for f, _ in verdict.uses}, verdict.uses
        assert continuation(case, "4.2.0").ok and continuation(case, "4.3.0").ok


def test_list_state_merged_by_the_v2_operator_is_refused_before_spark_4_2() -> None:
    # Spark 4.2+ records mergeOperatorVersion=2: a list state's values are joined without ','; Spark 4.1 cannot
    # decode them (its reader fails on the 4.2.1 case: "Invalid byte array backed UnsafeRow").
    for version in ("4.2.1", "4.3.0"):
        verdict = continuation(_open(version, "rocksdb_transform_with_state_in_pandas"), "4.1.1")
        assert any(
            "RocksDB merge operator v2" in line and "operator 0's list state" in line for line in verdict.missing
        )
        assert continuation(_open(version, "rocksdb_transform_with_state_in_pandas"), "4.2.0").ok
    # Written by 4.1 (merge operator v1), the same query continues on 4.1; a 4.2 window keeps no list state.
    assert continuation(_open("4.1.4", "rocksdb_transform_with_state_in_pandas"), "4.1.1").ok
    assert continuation(_open("4.2.1", "rocksdb_changelog_window"), "4.1.1").ok


def test_join_state_format_4_is_refused_before_spark_4_2_and_format_3_is_not() -> None:
    for version in ("4.2.1", "4.3.0"):
        verdict = continuation(_open(version, "rocksdb_join_v4"), "4.1.1")
        assert len(verdict.missing) == 1, verdict.missing
        assert "offsets/3 records spark.sql.streaming.join.stateFormatVersion = 4" in verdict.missing[0]
        assert "needs Spark 4.2 or newer (installed: Spark 4.1.1)" in verdict.missing[0]
        assert continuation(_open(version, "rocksdb_join_v4"), "4.2.0").ok
        # Format 3 (column families) is Spark 4.1's too: the 4.1 recording and 4.1's reader read it.
        assert continuation(_open(version, "rocksdb_join_v3"), "4.1.1").ok
