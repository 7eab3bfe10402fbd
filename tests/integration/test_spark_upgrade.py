"""A pipeline started on Spark 3.5 continues on the installed (newest default) Spark from the same checkpoint.

The first part runs as a user on Spark 3.5 would: `tidemark run` in the Spark 3.5 environment that
tools/spark_lines/smoke.py builds (pyspark 3.5.9 with its own pins, tidemark installed beside it from this
clone's wheel), as a subprocess. `tidemark check` on the installed Spark then says the checkpoint can be continued,
and the rest runs here; the sink must equal the pandas oracle over all the files, each (key, window) once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import read_sink, write_config
from tests.oracles import assert_matches_oracle, window_oracle
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
WINDOW, WATERMARK = timedelta(minutes=15), timedelta(minutes=10)


def spark35_python() -> Path:
    """The Spark 3.5 environment's python, with this clone's tidemark in it (built or reused: cached outside)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "spark_lines" / "smoke.py"), "env", "3.5@3.11"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1])


def _release(files: list[Path], landing: Path) -> None:
    for file in files:
        shutil.copy2(file, landing / file.name)
        time.sleep(0.02)


@pytest.mark.parametrize("state_store", ["rocksdb", "hdfs"])
def test_pipeline_from_spark_35_continues_here(
    spark: Any, tmp_path: Path, state_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    python = spark35_python()
    data = generate_events(tmp_path / "all", events=300, keys=3, files=5, seed=17, span=timedelta(hours=2))
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    _release(files[:3], tmp_path / "landing")
    config = write_config(tmp_path, checkpoint={"state_store": state_store})

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV", "PYTHONPATH"))}
    first = subprocess.run(
        [str(python), "-m", "tidemark.cli.main", "run", str(config), "--available-now"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    offsets = (tmp_path / "checkpoint" / "offsets" / "0").read_text()
    assert '"spark.sql.shuffle.partitions":"2"' in offsets.replace(" ", "")
    # Spark 3.5 writes no operator metadata: the checkpoint really is a 3.5 one.
    assert not (tmp_path / "checkpoint" / "state" / "0" / "_metadata").exists()

    capsys.readouterr()
    assert main(["check", str(config), "--json"]) == 0, capsys.readouterr()
    report = json.loads(capsys.readouterr().out)
    assert report["compatible"] is True
    assert any("can continue" in line for line in report["compared"]), report["compared"]

    _release(files[3:], tmp_path / "landing")
    assert main(["run", str(config), "--available-now"]) == 0
    expected = window_oracle([[f] for f in files], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    assert spark.read.parquet(str(tmp_path / "output")).count() == len(expected)


def test_checkpoint_from_here_continues_on_spark_35(spark: Any, tmp_path: Path) -> None:
    """The other way round is not promised by Spark: check does not refuse it, and it works for a window aggregation."""
    python = spark35_python()
    data = generate_events(tmp_path / "all", events=300, keys=3, files=5, seed=19, span=timedelta(hours=2))
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    _release(files[:3], tmp_path / "landing")
    config = write_config(tmp_path)
    assert main(["run", str(config), "--available-now"]) == 0
    assert (tmp_path / "checkpoint" / "state" / "0" / "_metadata").exists()  # written by Spark 4

    _release(files[3:], tmp_path / "landing")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV", "PYTHONPATH"))}
    for command in (["check", str(config), "--json"], ["run", str(config), "--available-now"]):
        done = subprocess.run(
            [str(python), "-m", "tidemark.cli.main", *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        if command[0] == "check":
            compared = json.loads(done.stdout)["compared"]
            assert any("Spark 3.5.9 can continue this checkpoint (written by Spark 4.0" in c for c in compared)
    expected = window_oracle([[f] for f in files], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
