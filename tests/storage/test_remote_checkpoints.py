"""The recorded real checkpoints (tests/fixtures/spark35) on Azurite and moto's S3: inspect, prune, the recovery
plan and its moves give the same answers as on a local copy, and a killed `prune --apply` or `recover --apply`
is finished by a rerun with every file in exactly one place."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import Azurite, MotoS3
from tidemark.context import PipelineContext
from tidemark.doctor.inspect import inspect_checkpoint
from tidemark.doctor.prune import prune_checkpoint
from tidemark.storage import open_storage

FIXTURES = Path(__file__).parent.parent / "fixtures" / "spark35"
CASES = ["hdfs_dedup_window", "rocksdb_window", "rocksdb_changelog_join", "rocksdb_sessions"]


def upload(local: Path, uri: str) -> int:
    """Copy a local folder to a store URI; return the number of files."""
    store = open_storage(uri)
    count = 0
    for root, _dirs, files in os.walk(local):
        for name in files:
            path = Path(root) / name
            store.write_atomic(path.relative_to(local).as_posix(), path.read_bytes())
            count += 1
    return count


def remote_files(uri: str) -> set[str]:
    return {e.rel for e in open_storage(uri).list_files()}


def local_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(params=["azure", "s3"])
def remote_root(request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty folder URI on Azurite (wasbs://) or moto (s3a://), credentials in the environment."""
    if request.param == "azure":
        azurite: Azurite = request.getfixturevalue("azure_env")
        yield azurite.uri(azurite.new_container(), "jobs")
    else:
        moto: MotoS3 = request.getfixturevalue("s3_env")
        yield f"s3a://{moto.new_bucket()}/jobs"


def _comparable(report: Any) -> dict[str, Any]:
    data = dataclasses.asdict(report)
    for key in ("path", "walker", "list_requests"):
        data.pop(key, None)
    data["findings"] = sorted((f["code"], f["severity"]) for f in data["findings"])
    return data


@pytest.mark.parametrize("case", CASES)
def test_inspect_and_prune_agree_with_the_local_copy(case: str, remote_root: str, tmp_path: Path) -> None:
    local = tmp_path / case
    shutil.copytree(FIXTURES / case, local)
    uri = f"{remote_root}/{case}"
    files = upload(local, uri)
    remote = inspect_checkpoint(uri)
    assert remote.walker == "flat" and remote.files_total == files
    assert remote.list_requests <= 10  # one flat listing of a few dozen blobs, a few small folders re-listed
    assert _comparable(remote) == _comparable(inspect_checkpoint(str(local)))

    dry = prune_checkpoint(uri, keep=1)
    assert dry.paths and dry.paths == prune_checkpoint(str(local), keep=1).paths
    assert remote_files(uri) == local_files(local)  # a dry run changes nothing
    prune_checkpoint(uri, keep=1, apply=True)
    prune_checkpoint(str(local), keep=1, apply=True)
    assert remote_files(uri) == local_files(local)
    assert not any(rel.startswith("_tidemark/journal") for rel in remote_files(uri))


_KILL_AFTER = """
import os, signal, sys
from tidemark.storage import journal, objectstore
journal.DELETE_BATCH = 1  # one file a batch, so the kill lands between two deletes
count = {{"n": 0}}
def counted(n):
    count["n"] += n
    if count["n"] > {after}:
        os.kill(os.getpid(), signal.SIGKILL)
real_delete = objectstore.ObjectStore.delete
def delete(self, rel):
    counted(1)
    real_delete(self, rel)
real_many = objectstore.ObjectStore.delete_files
def delete_files(self, rels):
    counted(len(rels))
    return real_many(self, rels)
real_present = objectstore.ObjectStore.delete_present
def delete_present(self, rels):
    counted(len(rels))
    real_present(self, rels)
objectstore.ObjectStore.delete = delete
objectstore.ObjectStore.delete_files = delete_files
objectstore.ObjectStore.delete_present = delete_present
{body}
"""


def _killed(body: str, after: int) -> None:
    """Run body in a fresh interpreter that dies by SIGKILL at its (after+1)-th object delete."""
    script = _KILL_AFTER.format(after=after, body=body)
    done = subprocess.run([sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, check=False)
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_prune_killed_mid_delete_is_finished_by_a_rerun(azure_env: Azurite, tmp_path: Path) -> None:
    case = "rocksdb_window"
    local = tmp_path / case
    shutil.copytree(FIXTURES / case, local)
    uri = azure_env.uri(azure_env.new_container(), case)
    upload(local, uri)
    planned = prune_checkpoint(uri, keep=1).paths
    assert len(planned) > 6
    _killed(f"from tidemark.doctor.prune import prune_checkpoint\nprune_checkpoint({uri!r}, keep=1, apply=True)", 3)
    left = remote_files(uri)
    assert any(rel.startswith("_tidemark/journal") for rel in left)  # the journal says what is still to go
    assert sum(1 for p in planned if p in left) == len(planned) - 3
    again = prune_checkpoint(uri, keep=1, apply=True)  # finishes the journal first, then plans again
    prune_checkpoint(str(local), keep=1, apply=True)
    assert remote_files(uri) == local_files(local)
    assert again.applied


def _pipeline(root: str, tmp_path: Path) -> Path:
    """A config whose checkpoint, sink and quarantine live under root (on a store), from the recorded run."""
    from tests.helpers import write_config

    upload(FIXTURES / "hdfs_window", f"{root}/checkpoint")
    upload(FIXTURES / "hdfs_window_out", f"{root}/output")
    open_storage(f"{root}/quarantine").write_atomic("batch-000000000000.jsonl", b'{"raw": "x"}\n')
    schema = "k STRING, ts TIMESTAMP, v INT"
    return write_config(
        tmp_path,
        source={"path": str(FIXTURES / "input"), "schema": schema},
        event_time={"column": "ts", "watermark": "1 minute"},
        aggregation={"key": ["k"], "window": "1 minute", "extra": [{"function": "sum", "column": "v", "name": "s"}]},
        sink={"path": f"{root}/output"},
        checkpoint={"location": f"{root}/checkpoint", "max_lookback": "3650 days"},
        quarantine={"path": f"{root}/quarantine"},
    )


def test_recovery_moves_killed_mid_copy_end_with_every_file_in_one_place(azure_env: Azurite, tmp_path: Path) -> None:
    from datetime import datetime

    from tidemark.compat import UTC
    from tidemark.config import load_config
    from tidemark.formats import read_recovery_marker
    from tidemark.recovery.apply import finish_interrupted_moves
    from tidemark.recovery.plan import plan_recovery

    root = azure_env.uri(azure_env.new_container(), "job")
    config_path = _pipeline(root, tmp_path)
    config = load_config(config_path)
    before = remote_files(root)
    plan = plan_recovery(PipelineContext.of(config), newest_event_time=None, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert remote_files(root) == before  # a plan is a dry run
    body = (
        "from datetime import datetime\n"
        "from tidemark.compat import UTC\n"
        "from tidemark.config import load_config\n"
        "from tidemark.context import PipelineContext\n"
        "from tidemark.recovery.apply import archive_and_mark\n"
        "from tidemark.recovery.plan import plan_recovery\n"
        f"config = PipelineContext.of(load_config({str(config_path)!r}))\n"
        "plan = plan_recovery(config, newest_event_time=None, now=datetime(2026, 1, 1, tzinfo=UTC))\n"
        "archive_and_mark(config, plan)\n"
    )
    _killed(body, 5)  # dies after five objects were copied and deleted: one more copied, not deleted
    after_kill = remote_files(root)
    journals = [r for r in after_kill if "/journal-" in r]
    assert len(journals) == 1
    finished = finish_interrupted_moves(PipelineContext.of(config))
    assert [r.purpose for r in finished] == ["recovery"]
    final = remote_files(root)
    assert not any("/journal-" in r for r in final)
    moves = [(m.source.removeprefix(f"{root}/"), m.target.removeprefix(f"{root}/")) for m in plan.moves]
    for rel in before:
        target = next((t + rel[len(s) :] for s, t in moves if rel == s or rel.startswith(f"{s}/")), None)
        if target is None:
            assert rel in final, f"{rel} was not to move but is gone"
        else:
            assert rel not in final and target in final, f"{rel} is not in exactly one place"
    marker = read_recovery_marker(open_storage(f"{root}/checkpoint").location)
    assert marker is not None and marker.resume_from == plan.resume_from
