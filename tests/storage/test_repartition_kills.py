"""Issue 58: `tidemark state repartition --apply` SIGKILLed in each of its phases (fetch, rewrite, verify, upload,
swap) where the checkpoint lives, on Azure (abfs:// on Azurite) and S3 (moto), and what the user does next is exact.

A store's cases are one chain on one prepared checkpoint, as a user would live it: the pipeline runs over the first
file; `--apply` is killed in the fetch; the user reruns it and it is killed in the rewrite; reruns, killed in the
verification; reruns, killed while uploading the new checkpoint; reruns, killed in the swap. Each kill is a fresh
Python and JVM (tests/storage/kill_repartition.py), at a seeded random point of its phase (the seed is printed;
TIDEMARK_CHAOS_SEED replays it), and counted only when the dying process recorded that phase. After each kill the
case checks what it left: before the swap, the checkpoint byte for byte as prepared; in the swap, every object in
its old place or its new one. The chain's last case then does what the docs tell the user (docs/evolve.md, "Killed
part way"): after a kill before the swap, `--apply` again; after one in the swap, `tidemark run`, which finishes it.
The next run reads the second file: the whole sink equals the pandas oracle, the newest batch records the new
partition count, the old checkpoint is archived byte for byte, and nothing of the killed attempts is left: no
journal, no staged copy or its owner record on the store, no scratch folder of a killed process in tidemark's cache.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_gone
from tests.oracles import assert_matches_oracle
from tests.servers import SparkStore
from tests.storage.kill_repartition import PHASES
from tests.storage.spark_stores import cloud_config, oracle, raw_sink
from tidemark.cache import cache_root
from tidemark.config import load_config
from tidemark.evolve.repartition import SCRATCH_PREFIX, repartition_checkpoint, scratch_owner
from tidemark.formats import SHUFFLE_PARTITIONS, Checkpoint
from tidemark.formats.layout import ARCHIVE_DIR, LOCK_FILE
from tidemark.formats.swap import OWNER_SUFFIX
from tidemark.pipeline.generate import GenerateResult, generate_events
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NEW_PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
STORES = {"abfs": "azure abfs", "s3a": "s3 (moto)"}
CASES = [
    pytest.param(
        kind,
        phase,
        id=f"{kind}-{phase}",
        marks=pytest.mark.reliability(fault=f"repartition killed at {phase}", storage=label, sink="-"),
    )
    for kind, label in STORES.items()
    for phase in PHASES
]


def _files(uri: str) -> dict[str, bytes]:
    store = open_storage(uri)
    return {e.rel: store.read_bytes(e.rel) or b"" for e in store.list_files("") if e.rel != LOCK_FILE}


def _identities(uri: str) -> dict[str, tuple[object, ...]]:
    """Each file's size, modification time and version tag as one listing shows them: a file written again (the
    same bytes included) gets a new time or tag."""
    return {e.rel: (e.size, e.mtime, e.etag) for e in open_storage(uri).list_files("") if e.rel != LOCK_FILE}


def _names(uri: str) -> set[str]:
    return {e.rel for e in open_storage(uri).list_files("")}


def _scratch_of(pid: int) -> list[Path]:
    """tidemark's scratch folders of a repartition that ran as process pid on this host."""
    here = socket.gethostname()
    return [p for p in (cache_root() / "tmp").glob(f"{SCRATCH_PREFIX}*") if scratch_owner(p.name) == (here, pid)]


@dataclass
class _Chain:
    """One store's prepared pipeline and what its kills left."""

    store: SparkStore
    root: str
    config: Any
    data: GenerateResult
    landing: Path
    prepared: dict[str, bytes]  # every file of the checkpoint before the first kill
    identities: dict[str, tuple[object, ...]]  # and how the listing showed each
    killed: list[str] = field(default_factory=list)  # the phases killed, in order
    pids: list[int] = field(default_factory=list)  # the killed processes

    @property
    def checkpoint(self) -> str:
        return f"{self.root}/checkpoint"

    @property
    def archive(self) -> str:
        return f"{self.root}/{ARCHIVE_DIR}"


@pytest.fixture(scope="module")
def chains() -> dict[str, _Chain]:
    """Each store's chain, prepared by its first case."""
    return {}


def _prepare(store: SparkStore, spark: Any, tmp: Path) -> _Chain:
    data = generate_events(tmp / "all", events=300, keys=4, files=2, seed=58)
    landing = tmp / "landing"
    landing.mkdir()
    shutil.copy2(data.files[0], landing / Path(data.files[0]).name)
    root = store.new_root()
    config = load_config(cloud_config(tmp, root))
    run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
    prepared = _files(f"{root}/checkpoint")
    assert prepared, "the first run wrote no checkpoint"
    return _Chain(store, root, config, data, landing, prepared, _identities(f"{root}/checkpoint"))


def _kill(chain: _Chain, phase: str, tmp: Path) -> dict[str, Any]:
    """`state repartition --apply` in a process of its own, killed in phase; what it recorded before dying."""
    record = tmp / f"{phase}.json"
    seed = f"{SEED}:{chain.store.kind}:{phase}"
    command = ["state", "repartition", chain.checkpoint, "--partitions", str(NEW_PARTITIONS), "--apply"]
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.kill_repartition", phase, seed, str(record), "--", *command],
        cwd=REPO,
        env={**os.environ, **chain.store.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=300)
    finally:
        _reap(process.pid)
    assert process.returncode == -signal.SIGKILL, f"exit {process.returncode}: {err.decode()[-3000:]}{out.decode()}"
    died = json.loads(record.read_text())
    assert died["phase"] == phase and died["pid"] == process.pid, died
    print(
        f"{chain.store.kind}: killed in {phase} {died['point']} (seed {SEED}); {died['seconds']} s into the process, "
        f"{died['phase_seconds']} s into the phase; its JVM gone {time.time() - died['time']:.1f} s later; "
        f"{time.monotonic() - started:.1f} s in all"
    )
    chain.killed.append(phase)
    chain.pids.append(process.pid)
    return died


def _reap(group: int) -> None:
    """The killed Python's JVM exits when its stdin closes (PySpark's gateway): wait for it, then kill what is
    left of the process group this test started (and say so: docs/evolve.md counts on the JVM leaving by itself)."""
    if wait_gone(group, 30, group=True):
        return
    print(f"the process group {group} outlived its Python by 30 s: killed")
    os.killpg(group, signal.SIGKILL)


def _journals(chain: _Chain) -> list[str]:
    return [rel for rel in _names(chain.archive) if rel.startswith("journal-")]


def _check_left(chain: _Chain, phase: str, died: dict[str, Any]) -> None:
    """What the kill in phase left, before the user's next step."""
    tops = {rel.split("/", 1)[0] for rel in _names(chain.archive)}
    owners = sorted(name for name in tops if name.endswith(OWNER_SUFFIX))
    staged = {name for name in tops if "-repartition-" in name and "-before-" not in name} - set(owners)
    if phase == "swap":  # only this attempt's staged copy (an earlier kill's was removed by this rerun), part moved
        assert _journals(chain), "killed in the swap but no journal is left"
        assert len(owners) == 1 and staged <= {owners[0][: -len(OWNER_SUFFIX)]}, (owners, staged)
        archived = [name for name in tops if "-before-repartition-" in name]
        assert len(archived) <= 1, archived
        old = set().union(*(_names(f"{chain.archive}/{name}") for name in archived)) | _names(chain.checkpoint)
        assert set(chain.prepared) <= old, "an object of the old checkpoint is in neither place"
        return
    assert not _journals(chain)
    assert _identities(chain.checkpoint) == chain.identities, f"killed in {phase}, the checkpoint changed"
    scratch = _scratch_of(died["pid"])
    if phase == "fetch":  # before anything is written: no scratch folder, nothing staged
        assert not scratch and not staged and not owners, (scratch, staged, owners)
        return
    assert len(scratch) == 1, f"killed in {phase}: its scratch folder should be left for the next run, got {scratch}"
    if phase == "upload":  # the staged copy, part way, with its owner's record
        assert len(owners) == 1 and staged <= {owners[0][: -len(OWNER_SUFFIX)]}, (owners, staged)
        chosen, total = (int(n) for n in died["point"].split("staging file ")[1].split(" started")[0].split(" of "))
        assert len(_names(f"{chain.archive}/{owners[0][: -len(OWNER_SUFFIX)]}")) == chosen - 1 < total
    else:  # rewrite, verify: nothing on the store yet
        assert not staged and not owners, (staged, owners)


def _last_of_its_store(request: pytest.FixtureRequest, kind: str) -> bool:
    """True when no later case of this store is selected in this session (the chain then finishes here)."""
    own = [item for item in request.session.items if item.nodeid.startswith(f"{request.node.nodeid.split('[')[0]}[")]
    mine = [item.nodeid for item in own if f"[{kind}-" in item.nodeid]
    return mine[-1] == request.node.nodeid


def _finish(chain: _Chain, spark: Any, tmp: Path) -> None:
    """The user's next step after the chain's last kill, then the pipeline's next run, all checked."""
    if chain.killed[-1] != "swap":  # before the swap the checkpoint is untouched: repartition again
        report = repartition_checkpoint(chain.checkpoint, NEW_PARTITIONS, apply=True)
        assert report.applied and report.verification is not None and report.verification.same
    for file in chain.data.files[1:]:
        shutil.copy2(file, chain.landing / Path(file).name)
    before = Checkpoint.open(chain.checkpoint).latest_committed_batch() if chain.killed[-1] != "swap" else None
    run_pipeline(chain.config, spark=spark, available_now=True, prestarts=[Failover()])  # finishes a killed swap
    after = Checkpoint.open(chain.checkpoint)
    newest = after.latest_committed_batch()
    assert before is None or newest > before
    assert after.offset(newest).conf[SHUFFLE_PARTITIONS] == str(NEW_PARTITIONS)
    assert_matches_oracle(raw_sink(f"{chain.root}/output", tmp / "sink"), oracle(chain.data))
    # the old checkpoint archived as it was; nothing else of the killed attempts left
    tops = {rel.split("/", 1)[0] for rel in _names(chain.archive)}
    assert len(tops) == 1 and "-before-repartition-" in next(iter(tops)), tops
    assert _files(f"{chain.archive}/{next(iter(tops))}") == chain.prepared
    assert not [p for pid in chain.pids for p in _scratch_of(pid)]


@pytest.mark.parametrize(("kind", "phase"), CASES)
def test_repartition_killed_in_each_phase_then_continued_exactly(
    kind: str,
    phase: str,
    chains: dict[str, _Chain],
    request: pytest.FixtureRequest,
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    store: SparkStore = request.getfixturevalue(f"{kind}_store")
    tmp = tmp_path_factory.mktemp(f"kills-{kind}")
    chain = chains.get(kind)
    if chain is None:
        t = time.monotonic()
        chain = chains[kind] = _prepare(store, spark, tmp)
        print(f"prepared in {time.monotonic() - t:.1f} s")
    t = time.monotonic()
    assert chain.killed == [p for p in PHASES if p in chain.killed], "the chain's kills run in phase order"
    died = _kill(chain, phase, tmp)
    t1 = time.monotonic()
    _check_left(chain, phase, died)
    print(f"kill+check {time.monotonic() - t:.1f} s (check {time.monotonic() - t1:.1f})")
    if _last_of_its_store(request, kind):
        t = time.monotonic()
        _finish(chain, spark, tmp)
        print(f"finished in {time.monotonic() - t:.1f} s")
