"""A checkpoint written before Spark 2.2 (no commit log) holds state Spark restarts from (issue 40).

Made from the corpus' Spark 2.4.8 window checkpoint the way Spark 2.1 would have left it: no commits/, offsets
entries without the SQL conf (2.2 began recording both), and batch 4 planned when it stopped. A restart re-runs
batch 4, loading state version 4, the output of batch 3: `state stats` counts that version and says what it is.
The count is checked against Spark 3.5.9's own figure for the same query and input (numRowsTotal of its batch 3,
in the corpus' expected.json; the synthesized deltas equal 3.5.9's, proof.json).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tidemark.cli.main import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


def _spark21(tmp_path: Path) -> Path:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(CORPUS / "spark-2.4.8" / "hdfs_window" / "checkpoint", checkpoint)
    shutil.rmtree(checkpoint / "commits")
    offsets = checkpoint / "offsets"
    for entry in sorted(p for p in offsets.iterdir() if p.name.isdigit()):
        version, metadata, *sources = entry.read_text().splitlines()
        data = json.loads(metadata)
        del data["conf"]
        entry.write_text("\n".join([version, json.dumps(data), *sources]))
        (offsets / f".{entry.name}.crc").unlink(missing_ok=True)
    (offsets / "4").write_text((offsets / "3").read_text())  # planned when the query stopped
    return checkpoint


def test_state_stats_counts_the_version_a_restart_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = _spark21(tmp_path)
    spark_figure = json.loads((CORPUS / "spark-3.5.9" / "hdfs_window" / "expected.json").read_text())
    rows = spark_figure["operators"][0]["num_rows_total"]
    assert spark_figure["last_committed_batch"] == 3

    assert main(["state", "stats", str(checkpoint), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["batch"] == 3 and [op["rows"] for op in stats["operators"]] == [rows]
    assert "re-runs batch 4, loading state version 4" in stats["note"]

    assert main(["state", "stats", str(checkpoint)]) == 0
    assert "written before Spark 2.2" in capsys.readouterr().out

    window = "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>"
    assert main(["state", "show", str(checkpoint), "--key-schema",
                 f"{window}, k STRING", "--value-schema",
                 "n BIGINT, s BIGINT", "--json"]) == 0  # fmt: skip
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["rows"]) == rows and "version 4" in shown["note"]

    # An earlier batch's output is readable too; batch 4 never finished.
    assert main(["state", "stats", str(checkpoint), "--batch", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 2
    assert main(["state", "stats", str(checkpoint), "--batch", "4"]) == 1
    assert "batches up to 3 finished" in capsys.readouterr().err

    assert main(["checkpoint", "inspect", str(checkpoint), "--json"]) == 0
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert "NO_COMMIT_LOG" in codes and "NO_COMMITTED_BATCH" not in codes


def test_a_missing_metadata_file_is_an_error_where_the_spark_refuses_it(tmp_path: Path) -> None:
    """Spark 4.2.1 and 4.3.0 fail a restart without `metadata` (STREAMING_CHECKPOINT_MISSING_METADATA_FILE, tried
    here by hand); 4.1 writes a new one. The finding follows the line that will restart it."""
    from tidemark.doctor.findings import check_metadata
    from tidemark.formats import Checkpoint, read_health

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(CORPUS / "spark-4.1.4" / "hdfs_window" / "checkpoint", checkpoint)
    assert check_metadata(read_health(Checkpoint.open(str(checkpoint)))) == []
    (checkpoint / "metadata").unlink()
    (checkpoint / ".metadata.crc").unlink(missing_ok=True)
    health = read_health(Checkpoint.open(str(checkpoint)))
    for version, severity in (("4.1.1", "warning"), ("4.2.1", "error"), ("4.3.0", "error"), ("3.5.9", "warning")):
        (finding,) = check_metadata(health, version)
        assert (finding.code, finding.severity.value) == ("METADATA_MISSING", severity), version
        assert ("cannot restart" in (finding.impact or "")) == (severity == "error")
