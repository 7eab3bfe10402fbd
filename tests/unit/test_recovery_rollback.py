"""`recover --to-batch N` on a synthetic checkpoint and sink: what moves, what is refused; no JVM."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.errors import CheckpointError, CheckpointLocked, UsageError
from tidemark.formats import FileKind, StoreScan
from tidemark.formats.scan import KIND_BITS
from tidemark.recovery.rollback import plan_rollback, roll_back
from tidemark.sinks.parquet import read_sink_log
from tidemark.storage.local import LocalFS


def _touch(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _parquet(path: Path) -> Path:
    """A Parquet file with the columns the config's window query writes (windowStart is the folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    when = pa.array([0], pa.timestamp("us", tz="UTC"))
    columns = {"user": pa.array(["u"]), "windowEnd": when, "firstEventTime": when, "lastEventTime": when}
    columns |= {"count": pa.array([1], pa.int64()), "value_sum": pa.array([1.0])}
    pq.write_table(pa.table(columns), path)
    return path


def _sink_file(sink: Path, batch: int) -> Path:
    return _parquet(sink / f"windowStart=2026-01-01 0{batch}%3A00%3A00" / f"part-{batch}.parquet")


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[Path, TidemarkConfig]:
    """Batches 0..3 committed; RocksDB changelogs 1..4 (snapshot at 2) in two partitions; sink batches 0..3."""
    config_path = write_config(tmp_path)
    ckpt, sink = tmp_path / "checkpoint", tmp_path / "output"
    for batch in range(4):
        for log in ("offsets", "commits"):
            _touch(ckpt / log / str(batch), "v1\n{}\n")
            _touch(ckpt / log / f".{batch}.crc")
        _touch(ckpt / "sources" / "0" / str(batch), "v1\n")
        for part in ("0", "1"):
            store = ckpt / "state" / "0" / part
            _touch(store / f"{batch + 1}.changelog")
            _touch(store / f".{batch + 1}.changelog.crc")
            _touch(store / "SSTs" / "000001-abc.sst")
        file = _sink_file(sink, batch)
        entry = json.dumps({"path": "file://" + quote(str(file)), "action": "add"})
        _touch(sink / "_spark_metadata" / str(batch), f"v1\n{entry}")
        _touch(tmp_path / "quarantine" / f"batch-{batch:012d}.jsonl", "{}\n")
    _touch(ckpt / "state" / "0" / "0" / "2.zip")
    _parquet(sink / "windowStart=2026-01-01 09%3A00%3A00" / "part-orphan.parquet")  # failed batch
    return tmp_path, load_config(config_path)


def _store(chain: dict[int, FileKind]) -> StoreScan:
    return StoreScan(0, "default", versions={v: KIND_BITS[k] for v, k in chain.items()})


def test_loadable_needs_a_snapshot_and_every_change_after_it() -> None:
    chain = _store({1: FileKind.CHANGELOG, 2: FileKind.ZIP, 4: FileKind.CHANGELOG})
    assert chain.can_load(2)
    assert chain.can_load(1)
    assert not chain.can_load(4)  # version 3 is missing
    assert _store({3: FileKind.SNAPSHOT, 4: FileKind.STATE_DELTA}).can_load(4)


def test_rollback_moves_later_batches_state_and_sink_files(pipeline: tuple[Path, TidemarkConfig]) -> None:
    root, config = pipeline
    plan = plan_rollback(PipelineContext.of(config), 1)
    assert plan.undone_batches == (2, 3) and plan.state_version == 2
    sources = {str(Path(m.source).relative_to(root)) for m in plan.moves}
    assert {"checkpoint/offsets/2", "checkpoint/commits/3", "checkpoint/commits/.3.crc"} <= sources
    assert {"checkpoint/sources/0/2", "checkpoint/sources/0/3"} <= sources
    assert {"checkpoint/state/0/0/3.changelog", "checkpoint/state/0/1/4.changelog"} <= sources
    assert "checkpoint/state/0/0/.4.changelog.crc" in sources
    assert not any("SSTs" in s or s.endswith(("/2.changelog", "/2.zip")) for s in sources)
    assert {"output/_spark_metadata/2", "output/_spark_metadata/3"} <= sources
    sink_files = {s for s in sources if s.startswith("output/windowStart")}
    assert {Path(s).name for s in sink_files} == {"part-2.parquet", "part-3.parquet", "part-orphan.parquet"}
    assert {"quarantine/batch-000000000002.jsonl", "quarantine/batch-000000000003.jsonl"} <= sources
    assert (root / "checkpoint" / "commits" / "3").exists()  # planning changes nothing

    result = roll_back(config, 1, apply=True)
    assert result.applied
    assert sorted(p.name for p in (root / "checkpoint" / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert read_sink_log(LocalFS(str(root / "output"))).latest_batch == 1
    assert len(result.plan.moves) == len(plan.moves)
    for move in result.plan.moves:
        assert Path(move.target).exists() and not Path(move.source).exists()
        assert ".tidemark-archive" in move.target and "rollback-to-1" in move.target


def test_rollback_refuses_an_uncommitted_batch(pipeline: tuple[Path, TidemarkConfig]) -> None:
    root, config = pipeline
    (root / "checkpoint" / "commits" / "3").unlink()
    _planned_long_ago(root / "checkpoint" / "offsets" / "3")  # a query that stopped mid-batch an hour ago
    with pytest.raises(UsageError, match="not committed"):
        plan_rollback(PipelineContext.of(config), 3)


def _planned_long_ago(offset_file: Path) -> None:
    old = time.time() - 3600
    os.utime(offset_file, (old, old))


def test_a_plain_spark_job_mid_batch_is_refused_and_nothing_moves(pipeline: tuple[Path, TidemarkConfig]) -> None:
    """A query tidemark did not start holds no lock: its fresh, uncommitted batch is what shows it is running."""
    root, config = pipeline
    _touch(root / "checkpoint" / "offsets" / "4", "v1\n{}\n")  # planned just now, not committed
    before = sorted(root.rglob("*"))
    with pytest.raises(CheckpointLocked, match=r"batch 4 was planned .* ago and has not committed"):
        roll_back(config, 2, apply=True)
    with pytest.raises(CheckpointLocked, match="batch 4"):
        plan_rollback(
            PipelineContext.of(config), 2
        )  # the dry run too: its plan would be stale the moment the job commits
    assert sorted(root.rglob("*")) == before
    _planned_long_ago(root / "checkpoint" / "offsets" / "4")  # the job crashed long ago: allowed
    assert roll_back(config, 2, apply=True).plan.undone_batches == (3, 4)
    assert not (root / "checkpoint" / "offsets" / "4").exists()


def test_rollback_refuses_when_the_state_is_gone(pipeline: tuple[Path, TidemarkConfig]) -> None:
    root, config = pipeline
    (root / "checkpoint" / "state" / "0" / "1" / "1.changelog").unlink()  # partition 1 has no snapshot
    with pytest.raises(CheckpointError, match=r"state/0/1 cannot load state version 2"):
        plan_rollback(PipelineContext.of(config), 1)
    assert (root / "checkpoint" / "commits" / "3").exists()


def test_cli_dry_run_json_and_bad_batch(
    pipeline: tuple[Path, TidemarkConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = pipeline
    config_path = str(root / "tidemark.toml")
    assert main(["recover", config_path, "--to-batch", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["applied"] is False and shown["plan"]["undone_batches"] == [3]
    assert (root / "checkpoint" / "commits" / "3").exists()
    assert main(["recover", config_path, "--to-batch", "7"]) == 2
    assert "not committed" in capsys.readouterr().err


def test_rollback_refuses_when_spark_could_not_restart_from_there(pipeline: tuple[Path, TidemarkConfig]) -> None:
    root, config = pipeline
    (root / "checkpoint" / "offsets" / "0").unlink()  # pruned: Spark restarts after 1 from offsets 0 and 1
    with pytest.raises(UsageError, match="offsets/0 is gone"):
        plan_rollback(PipelineContext.of(config), 1)
    assert plan_rollback(PipelineContext.of(config), 2).undone_batches == (3,)
