"""Recovery planning, sink log reading and repair, failover decisions: on synthetic sinks, no JVM."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import write_config
from tidemark.compat import UTC
from tidemark.config import TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.errors import CheckpointError, CheckpointLocked, UsageError
from tidemark.formats import read_recovery_marker
from tidemark.pipeline.start import launched
from tidemark.recovery.apply import archive_and_mark, finish_interrupted_moves, interrupted_recovery
from tidemark.recovery.archive import MoveKind
from tidemark.recovery.auto import prepare_failover, sweep_failed_batch_files
from tidemark.recovery.plan import ceil_to_grid, floor_to_grid, plan_recovery
from tidemark.sinks.parquet import (
    LedgerEntry,
    compact_ledger,
    finish_pending,
    partition_start,
    read_ledger,
    read_sink_log,
    record_batch,
    sink_data_files,
)
from tidemark.storage import Location, parse_location
from tidemark.storage import journal as journal_module
from tidemark.storage.local import LocalFS


def _loc(path: Path) -> Location:
    return parse_location(str(path))


def _log(sink: Path, up_to: int | None = None) -> set[str]:
    return set(read_sink_log(LocalFS(str(sink)), up_to).files)


def _rel(path: Path, sink: Path) -> str:
    return path.relative_to(sink).as_posix()


T0 = datetime(2026, 1, 1, tzinfo=UTC)
MIN15 = timedelta(minutes=15)


def _write_file(sink: Path, start: datetime, users: list[str], name: str) -> Path:
    folder = sink / f"windowStart={start:%Y-%m-%d %H}%3A{start:%M}%3A00"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "user": users,
            "windowEnd": [start + MIN15] * len(users),
            "count": [1] * len(users),
        }
    )
    path = folder / f"part-{name}.c000.snappy.parquet"
    pq.write_table(table, path)
    (folder / f".part-{name}.c000.snappy.parquet.crc").write_bytes(b"crc")
    return path


def _entry(path: Path) -> str:
    uri = "file://" + quote(str(path))
    return json.dumps({"path": uri, "size": path.stat().st_size, "isDir": False, "action": "add"})


def _write_log(sink: Path, name: str, files: list[Path], extra: list[str] | None = None) -> None:
    folder = sink / "_spark_metadata"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1", *(_entry(f) for f in files), *(extra or [])]
    (folder / name).write_text("\n".join(lines), encoding="utf-8")
    (folder / f".{name}.crc").write_bytes(b"crc")


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[TidemarkConfig, dict[str, Path]]:
    """A sink with three committed windows (two batches) and one file of a failed batch."""
    config = load_config(write_config(tmp_path, checkpoint={"max_lookback": "1 day"}))
    sink = tmp_path / "output"
    a = _write_file(sink, T0, ["u1", "u2"], "a")
    b = _write_file(sink, T0 + MIN15, ["u1"], "b")
    c = _write_file(sink, T0 + 2 * MIN15, ["u2"], "c")
    failed = _write_file(sink, T0 + 3 * MIN15, ["u1", "u2"], "failed")
    _write_log(sink, "0", [a])
    _write_log(sink, "1", [b, c])
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    (tmp_path / "quarantine").mkdir()
    (tmp_path / "quarantine" / "batch-000000000000.jsonl").write_text("{}\n")
    return config, {"sink": sink, "a": a, "b": b, "c": c, "failed": failed, "checkpoint": checkpoint}


def test_partition_start_reads_hive_escaped_folder(tmp_path: Path) -> None:
    path = _write_file(tmp_path, T0 + MIN15, ["u"], "x")
    assert partition_start(_rel(path, tmp_path)) == T0 + MIN15


def test_read_log_follows_compact_and_deletes(tmp_path: Path) -> None:
    sink = tmp_path / "out"
    files = [_write_file(sink, T0 + i * MIN15, ["u"], str(i)) for i in range(3)]
    _write_log(sink, "0", [files[0]])
    _write_log(sink, "1.compact", [files[0], files[1]])
    delete = json.loads(_entry(files[0]))
    delete["action"] = "delete"
    _write_log(sink, "2", [files[2]], [json.dumps(delete)])
    log = read_sink_log(LocalFS(str(sink)))
    assert log.latest_batch == 2 and log.base_compact == 1
    assert set(log.files) == {_rel(files[1], sink), _rel(files[2], sink)}
    assert _log(sink, up_to=0) == {_rel(files[0], sink)}
    assert len(sink_data_files(LocalFS(str(sink)))) == 3  # crc and log files are not data


def test_grid_rounding() -> None:
    when = T0 + timedelta(minutes=7)
    assert floor_to_grid(when, MIN15) == T0
    assert ceil_to_grid(when, MIN15) == T0 + MIN15
    assert ceil_to_grid(T0, MIN15) == T0


def test_plan_resumes_after_newest_committed_window_and_changes_nothing(
    pipeline: tuple[TidemarkConfig, dict[str, Path]],
) -> None:
    config, p = pipeline
    before = sorted(str(x) for x in p["sink"].parent.rglob("*"))
    plan = plan_recovery(
        PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1), now=T0 + timedelta(hours=2)
    )
    # Newest committed window starts at T0+30m, so the window after it (T0+45m) is the resume point.
    assert plan.newest_committed_window == T0 + 2 * MIN15
    assert plan.resume_from == T0 + 3 * MIN15
    assert not plan.clamped
    kinds = {m.kind for m in plan.moves}
    assert kinds == {MoveKind.CHECKPOINT, MoveKind.SINK_METADATA, MoveKind.FAILED_BATCH_FILE, MoveKind.QUARANTINE}
    failed_moves = [m for m in plan.moves if m.kind is MoveKind.FAILED_BATCH_FILE]
    assert {Path(m.source).name for m in failed_moves} == {p["failed"].name, f".{p['failed'].name}.crc"}
    assert set(plan.surviving_files) == {_rel(p[k], p["sink"]) for k in ("a", "b", "c")}
    assert all(".tidemark-archive" in m.target for m in plan.moves)
    assert sorted(str(x) for x in p["sink"].parent.rglob("*")) == before  # a plan is a dry run


def test_recover_refuses_a_plain_spark_job_mid_batch(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    """No tidemark lock, but a batch planned a moment ago and not committed: a query may still be writing."""
    config, p = pipeline
    offsets = p["checkpoint"] / "offsets"
    offsets.mkdir()
    (offsets / "2").write_text("v1\n{}\n")
    before = sorted(str(x) for x in p["sink"].parent.rglob("*"))
    with pytest.raises(CheckpointLocked, match=r"batch 2 was planned .* ago and has not committed"):
        plan_recovery(
            PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1), now=T0 + timedelta(hours=2)
        )
    assert sorted(str(x) for x in p["sink"].parent.rglob("*")) == before
    old = time.time() - 3600  # planned an hour ago: the query crashed, recovery goes ahead
    os.utime(offsets / "2", (old, old))
    plan = plan_recovery(
        PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1), now=T0 + timedelta(hours=2)
    )
    assert plan.resume_from == T0 + 3 * MIN15


def test_plan_clamps_to_max_lookback_and_says_so(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, _ = pipeline
    newest = T0 + timedelta(days=1, hours=2)  # look-back floor: T0 + 2h
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=newest)
    assert plan.unclamped_resume_from == T0 + 3 * MIN15
    assert plan.resume_from == T0 + timedelta(hours=2)
    assert plan.lost_windows == 5  # 00:45, 01:00, 01:15, 01:30, 01:45
    assert any("will NOT be rewritten" in note for note in plan.notes)


def test_plan_per_key_takes_the_oldest_newest_window(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, p = pipeline
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1), per_key=True)
    # u1's newest window is T0+15m, u2's T0+30m: resume at T0+30m and rewrite u2's T0+30m file too.
    assert plan.resume_from == T0 + 2 * MIN15
    rewritten = {Path(m.source).name for m in plan.moves if m.kind is MoveKind.REWRITTEN_PARTITION_FILE}
    assert p["c"].name in rewritten
    assert set(plan.surviving_files) == {_rel(p[k], p["sink"]) for k in ("a", "b")}


def test_archive_then_inject_repairs_new_log(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, p = pipeline
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1))
    archive_and_mark(PipelineContext.of(config), plan)
    assert not (p["sink"] / "_spark_metadata").exists()
    assert not p["failed"].exists() and p["a"].exists()
    assert (Path(plan.archive) / "sink-metadata" / "_spark_metadata" / "1").exists()
    assert (Path(plan.archive) / "checkpoint" / "commits").is_dir()
    marker = read_recovery_marker(_loc(p["checkpoint"]))
    assert marker is not None and not marker.injected and marker.resume_from == plan.resume_from
    assert finish_pending(_loc(p["checkpoint"]), _loc(p["sink"])) is None  # no new batch committed yet
    # The replay's first commit: a new log with batch 0 (and its Hadoop checksum).
    new = _write_file(p["sink"], T0 + 3 * MIN15, ["u1"], "new")
    _write_log(p["sink"], "0", [new])
    assert finish_pending(_loc(p["checkpoint"]), _loc(p["sink"])) == 3
    assert _log(p["sink"]) == {_rel(f, p["sink"]) for f in (p["a"], p["b"], p["c"], new)}
    assert not (p["sink"] / "_spark_metadata" / ".0.crc").exists()  # stale checksum moved aside
    lines = (p["sink"] / "_spark_metadata" / "0").read_text().splitlines()
    assert lines[0] == "v1" and len(lines) == 5
    marker = read_recovery_marker(_loc(p["checkpoint"]))
    assert marker is not None and marker.injected
    assert finish_pending(_loc(p["checkpoint"]), _loc(p["sink"])) is None


def test_inject_goes_into_newest_compact(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, p = pipeline
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1))
    archive_and_mark(PipelineContext.of(config), plan)
    new = [_write_file(p["sink"], T0 + (4 + i) * MIN15, ["u1"], f"n{i}") for i in range(2)]
    _write_log(p["sink"], "0", [new[0]])
    _write_log(p["sink"], "9.compact", new)
    _write_log(p["sink"], "10", [])
    assert finish_pending(_loc(p["checkpoint"]), _loc(p["sink"])) == 3
    assert "part-a" in (p["sink"] / "_spark_metadata" / "9.compact").read_text()
    assert "part-a" not in (p["sink"] / "_spark_metadata" / "0").read_text()
    assert len(_log(p["sink"])) == 5


def _failover(config: TidemarkConfig) -> datetime | None:
    """prepare_failover on the start `tidemark run` plans (no Spark starts unless a recovery needs it)."""
    with launched(config) as launch:
        return prepare_failover(launch)


def test_failover_fail_mode_raises_with_next_step(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, _ = pipeline
    with pytest.raises(CheckpointError, match="tidemark recover"):
        _failover(config)


def test_failover_does_nothing_for_a_fresh_or_healthy_pipeline(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    assert _failover(config) is None  # nothing anywhere
    checkpoint = tmp_path / "checkpoint" / "offsets"
    checkpoint.mkdir(parents=True)
    (checkpoint / "0").write_text("v1\n{}\n")
    _write_log(tmp_path / "output", "0", [])
    assert _failover(config) is None  # checkpoint present


def test_failover_keeps_the_resume_point_of_a_recovered_checkpoint(
    pipeline: tuple[TidemarkConfig, dict[str, Path]],
) -> None:
    config, _ = pipeline
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1))
    archive_and_mark(PipelineContext.of(config), plan)
    assert _failover(config) == plan.resume_from


def test_recover_refuses_rate_source(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, source={"format": "rate", "path": None, "schema": None}))
    with pytest.raises(UsageError, match="rate source"):
        plan_recovery(PipelineContext.of(config), None)


def _age(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def test_sweep_moves_only_files_written_after_the_newest_commit(
    pipeline: tuple[TidemarkConfig, dict[str, Path]],
) -> None:
    """Retention expired batch 0's entry (its file is listed nowhere) and a killed batch left a file."""
    config, p = pipeline
    _write_log(p["sink"], "0", [])  # the compacted log no longer names part-a
    commit = p["checkpoint"] / "commits" / "1"
    commit.write_text("v1\n{}\n")
    now = time.time()
    for name in ("a", "b", "c"):
        _age(p[name], now - 600)
    _age(commit, now - 300)
    _age(p["failed"], now - 10)
    moves = sweep_failed_batch_files(PipelineContext.of(config))
    assert {Path(m.source).name for m in moves} == {p["failed"].name, f".{p['failed'].name}.crc"}
    assert p["a"].exists() and not p["failed"].exists()
    assert all(Path(m.target).exists() for m in moves)
    assert sweep_failed_batch_files(PipelineContext.of(config)) == []  # a second start finds nothing


def test_sweep_keeps_what_the_ledger_names_even_when_newer(pipeline: tuple[TidemarkConfig, dict[str, Path]]) -> None:
    config, p = pipeline
    commit = p["checkpoint"] / "commits" / "1"
    commit.write_text("v1\n{}\n")
    _age(commit, time.time() - 300)
    checkpoint = LocalFS(str(p["checkpoint"]))
    sink = LocalFS(str(p["sink"]))
    entry = LedgerEntry(2, "2026-01-01T00:00:00+00:00", ((_rel(p["failed"], p["sink"]), 1),), 2)
    checkpoint.write_atomic("_tidemark/ledger/000000000002.json", entry.to_json().encode())
    assert read_ledger(checkpoint)[2] == entry
    assert sweep_failed_batch_files(PipelineContext.of(config)) == []
    assert p["failed"].exists()
    # The ledger's own record of a batch comes from the sink log (plain file) of that batch.
    recorded = record_batch(checkpoint, sink, 1, 7)
    assert recorded is not None and {f for f, _ in recorded.files} == {_rel(p[k], p["sink"]) for k in ("b", "c")}
    assert recorded.rows == 7 and all(size > 0 for _, size in recorded.files)


def test_ledger_chunks_merge_singles_and_keep_every_batch(tmp_path: Path) -> None:
    checkpoint = LocalFS(str(tmp_path / "ck"))
    entries = [LedgerEntry(b, "t", ((f"f{b}", b),), b) for b in range(5)]
    for entry in entries:
        checkpoint.write_atomic(f"_tidemark/ledger/{entry.batch:012d}.json", entry.to_json().encode())
    assert compact_ledger(checkpoint) == 5
    listing = checkpoint.list_dir("_tidemark/ledger")
    assert listing is not None and [n for n, _ in listing.files] == ["chunk-000000000000-000000000004.jsonl"]
    assert read_ledger(checkpoint) == {e.batch: e for e in entries}


def test_interrupted_recovery_is_finished_not_planned_again(
    pipeline: tuple[TidemarkConfig, dict[str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the first moves of `recover --apply`: the rerun finishes the journal and keeps the plan."""
    config, p = pipeline
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=T0 + timedelta(hours=1))
    calls = {"n": 0}
    real = journal_module._Runner.move

    def crash_after_two(self: object, step: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # stands in for SIGKILL: the journal stays
        real(self, step)  # type: ignore[arg-type]

    monkeypatch.setattr(journal_module._Runner, "move", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        archive_and_mark(PipelineContext.of(config), plan)
    monkeypatch.setattr(journal_module._Runner, "move", real)
    assert read_recovery_marker(_loc(p["checkpoint"])) is None
    finished = finish_interrupted_moves(PipelineContext.of(config))
    assert [r.purpose for r in finished] == ["recovery"]
    marker = read_recovery_marker(_loc(p["checkpoint"]))
    assert marker is not None and marker.resume_from == plan.resume_from
    resumed = interrupted_recovery(PipelineContext.of(config))
    assert resumed == plan
    for move in plan.moves:  # each file in exactly one place (the fresh checkpoint holds only the marker)
        assert Path(move.target).exists()
        if move.kind is not MoveKind.CHECKPOINT:
            assert not Path(move.source).exists()
    assert [p.name for p in p["checkpoint"].iterdir()] == ["_tidemark"]
