"""Issue 27: Spark itself writes the checkpoint and the sink on wasbs:// (Azurite, hadoop-azure's emulator mode,
through a fault proxy on port 10000) and s3a:// (moto, through a fault proxy), with the credentials tidemark's
own I/O takes mapped into Hadoop's settings. Output equals the pandas oracle, nothing lands in the working
folder, and every tool gives the same answers on what Spark wrote there as on a local run of the same events.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tests.oracles import assert_matches_oracle, read_valid_events
from tests.servers import SparkStore
from tests.storage.spark_stores import cloud_config, events, oracle, raw_sink
from tidemark.config import TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.pipeline.generate import GenerateResult
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Written:
    """One pipeline run on a store and the same events run locally."""

    store: SparkStore
    root: str
    config: TidemarkConfig
    local_root: Path
    local: TidemarkConfig
    data: GenerateResult
    batches: int
    work: Path
    tmp: Path
    before: frozenset[Path]


@pytest.fixture(scope="module", params=["wasb", "s3a"])
def written(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Written:
    store: SparkStore = request.getfixturevalue(f"{request.param}_store")
    tmp = tmp_path_factory.mktemp(store.kind)
    data = events(tmp, files=3)
    root = store.new_root()
    config = load_config(cloud_config(tmp, root))
    local_root = tmp / "local"
    local_root.mkdir()
    local = load_config(
        write_config(
            local_root,
            source={"path": str(tmp / "landing")},
            sink={"path": str(local_root / "output")},
            checkpoint={"location": str(local_root / "checkpoint")},
            quarantine={"path": str(local_root / "quarantine")},
            monitor={"dir": str(local_root / "monitor")},
        )
    )
    work = tmp / "cwd"
    work.mkdir()
    before = frozenset(tmp.iterdir())
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(work)
        result = run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
    assert store.proxy.counts["write"] > 0  # Spark's and tidemark's requests went through the proxy
    local_result = run_pipeline(local, spark=spark, available_now=True, prestarts=[Failover()])
    assert local_result.batches == result.batches
    return Written(store, root, config, local_root, local, data, result.batches, work, tmp, before)


def test_output_equals_the_oracle_and_nothing_lands_locally(written: Written) -> None:
    assert list(written.work.iterdir()) == []
    assert frozenset(written.tmp.iterdir()) == written.before
    on_server = {e.rel for e in open_storage(f"{written.root}/checkpoint").list_files()}
    assert {"metadata", f"commits/{written.batches - 1}"} <= on_server
    assert any(rel.startswith("state/0/") for rel in on_server)
    assert any(e.rel.startswith("_spark_metadata/") for e in open_storage(f"{written.root}/output").list_files())
    assert_matches_oracle(raw_sink(f"{written.root}/output", written.tmp / "raw"), oracle(written.data))


# --- every tool on what Spark wrote there vs on the local run ----------------------------------------------------

# Fields that name where a thing is or how it was read, not what it is.
_WHERE = {"path", "checkpoint", "sink", "config", "walker", "list_requests", "fetched", "exported_to", "archive"}


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _plain(value: Any, roots: tuple[str, ...]) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v, roots) for k, v in value.items() if k not in _WHERE}
    if isinstance(value, list | tuple):
        items = [_plain(v, roots) for v in value]
        return sorted(items) if all(isinstance(i, str) for i in items) else items
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<root>")
        return _UUID.sub("<uuid>", value)  # file names Spark makes unique per run
    return value


def _same(cloud: Any, local: Any, written: Written) -> None:
    roots = (written.root, str(written.local_root))
    assert json.dumps(_plain(cloud, roots), default=str, sort_keys=True) == json.dumps(
        _plain(local, roots), default=str, sort_keys=True
    )


def _no_crc(files: list[str]) -> list[str]:
    """Hadoop's local file system writes .crc siblings; object stores have none."""
    return sorted(f for f in files if not f.endswith(".crc"))


def test_checkpoint_inspect_and_prune_agree(written: Written) -> None:
    from tidemark.doctor.inspect import inspect_checkpoint
    from tidemark.doctor.prune import prune_checkpoint

    cloud = inspect_checkpoint(f"{written.root}/checkpoint", sink=f"{written.root}/output")
    local = inspect_checkpoint(str(written.local_root / "checkpoint"), sink=str(written.local_root / "output"))
    assert cloud.walker == "flat" and cloud.files_total > 0
    for field in ("latest_committed_batch", "oldest_offset_batch", "latest_committed_watermark", "state_provider"):
        assert getattr(cloud, field) == getattr(local, field), field
    assert sorted(f.code for f in cloud.findings) == sorted(f.code for f in local.findings)
    for mine, theirs in zip(cloud.operators, local.operators, strict=True):
        assert (mine.id, mine.name, mine.partitions, mine.store_names) == (
            theirs.id,
            theirs.name,
            theirs.partitions,
            theirs.store_names,
        )
        assert (mine.versions_held, mine.latest_version, mine.max_replay_on_load) == (
            theirs.versions_held,
            theirs.latest_version,
            theirs.max_replay_on_load,
        )
        assert {k for k in mine.files_by_kind if k != "crc"} == {k for k in theirs.files_by_kind if k != "crc"}
    assert cloud.sink is not None and local.sink is not None
    assert (cloud.sink.entries, cloud.sink.latest_batch) == (local.sink.entries, local.sink.latest_batch)

    before = {e.rel for e in open_storage(f"{written.root}/checkpoint").list_files()}
    dry = prune_checkpoint(f"{written.root}/checkpoint", keep=1)
    assert dry.paths and _no_crc(dry.paths) == _no_crc(
        prune_checkpoint(str(written.local_root / "checkpoint"), keep=1).paths
    )
    assert {e.rel for e in open_storage(f"{written.root}/checkpoint").list_files()} == before  # a dry run


def test_state_stats_show_diff_expired_agree(written: Written) -> None:
    from tidemark.statestore.diff import diff_state
    from tidemark.statestore.expired import find_expired
    from tidemark.statestore.show import show_state
    from tidemark.statestore.stats import state_stats

    cloud, local = f"{written.root}/checkpoint", str(written.local_root / "checkpoint")
    stats = state_stats(cloud)
    assert stats.fetched is not None and stats.fetched.files > 0  # read from the server, through the local cache
    assert sum(op.rows for op in stats.operators) > 0
    local_stats = state_stats(local)
    assert [(o.id, o.rows, [p.rows for p in o.partitions]) for o in stats.operators] == [
        (o.id, o.rows, [p.rows for p in o.partitions]) for o in local_stats.operators
    ]
    _same(show_state(cloud, limit=None), show_state(local, limit=None), written)
    last = written.batches - 1
    _same(diff_state(cloud, 0, last), diff_state(local, 0, last), written)
    _same(find_expired(cloud), find_expired(local), written)


def test_audit_recover_rollback_and_check_agree(written: Written, spark: Any) -> None:
    from tidemark.evolve.check import check_config
    from tidemark.recovery.audit import audit_sink
    from tidemark.recovery.plan import plan_recovery

    audit = audit_sink(written.config)
    assert audit.ok and audit.data_files > 0
    _same(audit, audit_sink(written.local), written)
    newest = max(e["ts"] for e in read_valid_events(written.data.files))
    cloud_plan = plan_recovery(PipelineContext.of(written.config), newest)
    local_plan = plan_recovery(PipelineContext.of(written.local), newest)
    assert (cloud_plan.resume_from, cloud_plan.committed_files, cloud_plan.lost_windows) == (
        local_plan.resume_from,
        local_plan.committed_files,
        local_plan.lost_windows,
    )
    from tidemark.recovery.rollback import plan_rollback

    cloud_back, local_back = (
        plan_rollback(PipelineContext.of(written.config), 0),
        plan_rollback(PipelineContext.of(written.local), 0),
    )
    assert cloud_back.undone_batches == local_back.undone_batches and cloud_back.undone_batches

    def moved(plan: Any, root: str) -> list[str]:
        return _no_crc([_UUID.sub("<uuid>", str(m.source).replace(root, "<root>")) for m in plan.moves])

    assert moved(cloud_back, written.root) == moved(local_back, str(written.local_root))
    checked = check_config(written.config, "cloud.toml", spark=spark)
    assert checked.compatible and checked.compared
    assert checked.compared == check_config(written.local, "local.toml", spark=spark).compared


def test_analyze_and_report_read_the_progress_log_on_the_store(written: Written, tmp_path: Path) -> None:
    from tidemark.monitor.analyze import analyze
    from tidemark.monitor.report import write_report

    cloud = analyze(f"{written.root}/monitor")
    local = analyze(str(written.local_root / "monitor"))
    assert [r.batches for r in cloud.runs] == [r.batches for r in local.runs] == [written.batches]
    html = tmp_path / "report.html"
    written_report = write_report(f"{written.root}/monitor", html)
    assert written_report.batches == written.batches and html.stat().st_size > 0


def test_a_repartition_dry_run_of_a_cloud_checkpoint_reads_it_and_writes_nothing(written: Written) -> None:
    """#39: repartition takes checkpoints where they live (tests/storage/test_repartition_cloud.py applies it)."""
    from tidemark.evolve.repartition import repartition_checkpoint

    before = {e.rel for e in open_storage(written.root).list_files("")}
    report = repartition_checkpoint(f"{written.root}/checkpoint", 1)
    assert not report.applied and report.stores and report.new_partitions == 1
    assert {e.rel for e in open_storage(written.root).list_files("")} == before
