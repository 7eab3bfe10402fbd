"""A batch the sink wrote before a stop and Spark had not committed: on the restart Spark runs it again, the sink
skips it (Spark's file sink log: `Skipping already committed batch`) and its plan never runs, so its progress event
reports the zero values of a plan that did not run, a malformed-row count of 0 among them. The quarantine must not
take that 0 for clean: it reads the batch's input again and writes each malformed line once (issue 58: the chaos
test lost batch 0's five records when a kill fell between the file sink's log and Spark's commit).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.integration.test_recovery import _assert_matches_oracle, _expected
from tests.oracles import count_malformed
from tidemark.cli.main import main
from tidemark.formats import Checkpoint, quarantine_batch_name
from tidemark.formats import read_quarantine_marker as read_marker
from tidemark.formats import write_quarantine_marker as write_marker
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine

pytestmark = [pytest.mark.integration]


def _landed(tmp_path: Path, files: int) -> list[Path]:
    data = generate_events(tmp_path / "all", events=100 * files, keys=3, files=files, seed=11, malformed_fraction=0.06)
    (tmp_path / "landing").mkdir()
    for file in data.files:
        shutil.copy2(file, tmp_path / "landing" / file.name)
    return list(data.files)


def _by_batch(tmp_path: Path) -> tuple[dict[int, int], dict[int, int]]:
    """The quarantine's records per batch, and the malformed lines of the files each committed batch read (the
    oracle's count, from the checkpoint's source log)."""
    records = read_quarantine(str(tmp_path / "quarantine"))
    raws = [r["raw"] for r in records]
    assert len(set(raws)) == len(raws), "a malformed line quarantined twice"
    written = {b: sum(1 for r in records if r["batch_id"] == b) for b in {r["batch_id"] for r in records}}
    handle = Checkpoint.open(str(tmp_path / "checkpoint"))
    read = handle.source_files_of(handle.commit_batches())
    expected = {b: count_malformed([Path(f.removeprefix("file://")) for f in fs]) for b, fs in read.items()}
    return written, {b: n for b, n in expected.items() if n}


def _take_back(checkpoint: Path, batch: int) -> None:
    """What a kill between the sink's entry of `batch` and Spark's commit leaves: no commits/<batch> (nor later),
    no offsets past it; the sink keeps what it wrote."""
    for folder, first in (("commits", batch), ("offsets", batch + 1)):
        for entry in (checkpoint / folder).iterdir():
            if entry.name.isdigit() and int(entry.name) >= first:
                entry.unlink()
                (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)


def test_a_batch_the_file_sink_skips_on_its_rerun_keeps_its_malformed_records(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    files = _landed(tmp_path, 3)
    config = write_config(tmp_path)
    assert main(["run", str(config), "--available-now"]) == 0
    written, expected = _by_batch(tmp_path)
    assert written == expected and 2 in expected, (written, expected)
    # The stop: batch 2 is in the file sink's log (output/_spark_metadata/2) and not in Spark's commit log; the
    # quarantine, written only after a commit, is at batch 1.
    _take_back(tmp_path / "checkpoint", 2)
    (tmp_path / "quarantine" / quarantine_batch_name(2)).unlink()
    write_marker(str(tmp_path / "quarantine"), 1)
    assert (tmp_path / "output" / "_spark_metadata" / "2").is_file()

    capfd.readouterr()
    assert main(["run", str(config), "--available-now"]) == 0
    # The batch's line says what happened rather than "0 rows ... quarantined 0".
    assert "batch 2: no row read from its new input: in the sink before the last stop" in capfd.readouterr().err
    _assert_matches_oracle(spark, tmp_path / "output", _expected(files))
    written, expected = _by_batch(tmp_path)
    assert written == expected, f"written {written}, expected {expected}"
    assert sum(written.values()) == count_malformed(files)
    assert read_marker(str(tmp_path / "quarantine")) == max(
        Checkpoint.open(str(tmp_path / "checkpoint")).commit_batches()
    )
