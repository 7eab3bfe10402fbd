"""Fault-matrix cells no other test proves (docs/reliability.md), on the default Spark and in the Spark 4.2 lane.

A pipeline with its checkpoint and sink on a store (a local folder, abfs:// over Azurite's Blob endpoint, s3a:// on
moto) is started as a user starts it (`tidemark run`, its own process and JVM, a 1-second trigger) and SIGKILLed
(its Python and its JVM: the process group) at a random moment: a random delay after a random batch was planned.
The restart (on the tests' shared session; the Delta sink in a JVM of its own, with Delta's jars) finishes exactly.
Then the checkpoint is deleted on the server, a file lands, and `recover --apply` continues exactly once. The sink
is read off the server without tidemark: every Parquet part file with pyarrow, a Delta table with delta-rs. The
seed is printed; set TIDEMARK_CHAOS_SEED to replay a failure. Delta on s3a:// (the lanes only) is killed at the
moment that tests its transaction instead: right after its commit, before Spark's.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_chaos import _seed, run_until_killed
from tests.oracles import assert_matches_oracle, window_oracle
from tests.storage.spark_stores import WATERMARK, WINDOW, cloud_config, delete_tree, events, raw_sink
from tidemark.cli.main import main
from tidemark.config import load_config
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KILL, LOST = "driver kill", "checkpoint lost + recover"
# Each store's fixture (None: a local folder) and its name in the matrix.
STORES = {"local": None, "abfs": "abfs_store", "s3a": "s3a_store"}
# The default run (no smoke target: `make test`'s first step) proves the local cells with tests/integration's
# chaos, recovery and Delta tests; only the other lanes need them from here (cases not generated, not skipped).
IN_A_LANE = bool(os.environ.get("TIDEMARK_SMOKE_TARGET"))
KINDS = [kind for kind in STORES if IN_A_LANE or kind != "local"]
NAMES = {"local": "local", "abfs": "azure abfs", "s3a": "s3 (moto)"}


def _root(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    fixture = STORES[kind]
    return str(tmp_path / "store") if fixture is None else str(request.getfixturevalue(fixture).new_root())


def _forget(uri: str) -> None:
    """The checkpoint deleted: the folder, or every object under it on the server (folder markers too)."""
    if "://" in uri:
        delete_tree(uri)
    else:
        shutil.rmtree(uri)
    assert not open_storage(uri).exists("")


def _kill_at_random(config: Path, checkpoint: str, rng: random.Random) -> None:
    """`tidemark run CONFIG` (a 1-second trigger: it never ends by itself) SIGKILLed a random 0-2 s after a random
    one of its first three batches was planned."""
    batch, delay = rng.randrange(3), rng.uniform(0.0, 2.0)
    print(f"the driver dies {delay:.2f} s after batch {batch} is planned")
    store = open_storage(checkpoint)

    def wait(driver: Any) -> None:
        deadline = time.monotonic() + 240
        while not store.exists(f"offsets/{batch}"):
            assert driver.poll() is None, f"the driver exited ({driver.returncode}) before batch {batch}"
            assert time.monotonic() < deadline, f"batch {batch} was not planned within 240 s"
            time.sleep(0.05)
        time.sleep(delay)

    code = run_until_killed(["run", str(config)], wait)
    assert code == -9, f"the driver was not killed: it exited {code}"


def _staged(tmp_path: Path) -> tuple[list[Path], Path]:
    """Four one-batch files: three in the landing folder, the fourth staged to land after the checkpoint is lost."""
    files = list(events(tmp_path, files=4).files)
    staged = tmp_path / "staged"
    staged.mkdir()
    files[3].rename(staged / files[3].name)
    return files, staged / files[3].name


def _oracle(files: list[Path]) -> Any:
    return window_oracle([[f] for f in files], window=WINDOW, watermark=WATERMARK)


def _cells(kind: str, sink: str) -> list[pytest.MarkDecorator]:
    storage = NAMES[kind]
    return [
        pytest.mark.reliability(fault=KILL, storage=storage, sink=sink),
        pytest.mark.reliability(fault=LOST, storage=storage, sink=sink),
    ]


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=_cells(kind, "parquet")) for kind in KINDS])
def test_parquet_sink_killed_at_a_random_moment_then_its_checkpoint_lost(
    kind: str, request: pytest.FixtureRequest, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(_seed())
    files, late = _staged(tmp_path)
    root = _root(kind, request, tmp_path)
    config = cloud_config(tmp_path, root, trigger={"mode": "processing-time", "interval": "1 second"})

    _kill_at_random(config, f"{root}/checkpoint", rng)
    # The restart: the killed batch's files (if any reached the sink) moved aside, the batch run again.
    run_pipeline(load_config(config), spark=spark, available_now=True, prestarts=[Failover()])
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), _oracle(files[:3]))

    _forget(f"{root}/checkpoint")
    late.rename(tmp_path / "landing" / late.name)
    capsys.readouterr()
    assert main(["recover", str(config), "--apply"]) == 0, capsys.readouterr().err[-3000:]
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw-after"), _oracle(files))


if IN_A_LANE:  # the default run: tests/integration/test_delta_chaos.py

    @pytest.mark.reliability(fault=KILL, storage="local", sink="delta")
    def test_delta_sink_killed_at_a_random_moment_then_restarted(tmp_path: Path) -> None:
        """The Delta sink, each command in its own JVM with this line's Delta jars (the shared session has
        none); a local table's lost checkpoint is test_smoke.py's `delta` test."""
        from tests.integration.test_delta_sink import _assert_exact, _run

        rng = random.Random(_seed())
        files, _ = _staged(tmp_path)
        root = str(tmp_path / "store")
        trigger = {"mode": "processing-time", "interval": "1 second"}
        config = cloud_config(tmp_path, root, sink={"format": "delta", "path": f"{root}/output"}, trigger=trigger)

        _kill_at_random(config, f"{root}/checkpoint", rng)
        done = _run(config)  # --available-now
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_exact(Path(root) / "output", _oracle(files[:3]))

    @pytest.mark.reliability(fault=KILL, storage=NAMES["s3a"], sink="delta")
    @pytest.mark.reliability(fault=LOST, storage=NAMES["s3a"], sink="delta")
    def test_delta_sink_on_s3a_killed_after_its_commit_then_its_checkpoint_lost(tmp_path: Path, s3a_store: Any) -> None:
        """The Delta sink with checkpoint and table on s3a:// (moto), each command in its own JVM with this line's
        Delta and S3A jars: killed right after batch 1's Delta commit and before Spark's `commits/1`, rerun (the
        replayed batch skipped by the table's transaction), then the checkpoint deleted on the server, a file lands
        and `recover --apply` resumes. The table, copied off the server and read with delta-rs, equals the oracle.
        (The default run proves S3 on Spark 4.1 with tests/storage/test_delta_on_stores.py.)"""
        from tests.integration.test_delta_sink import _assert_exact, _run
        from tests.integration.test_delta_sink import _cli as own_process
        from tests.storage.test_delta_on_stores import _copy_table

        files = list(events(tmp_path, files=3).files)  # one file a batch: each batch costs seconds on a store
        staged = tmp_path / "staged"
        staged.mkdir()
        files[2].rename(staged / files[2].name)  # lands after the checkpoint is lost
        root = s3a_store.new_root()
        config = cloud_config(tmp_path, root, sink={"format": "delta", "path": f"{root}/output"})

        killed = _run(config, kill_after_batch=1)
        assert killed.returncode == -9, killed.stderr[-3000:]
        commits = {e.rel for e in open_storage(f"{root}/checkpoint").list_files() if e.rel.startswith("commits/")}
        assert commits == {"commits/0"}
        done = _run(config)
        assert done.returncode == 0, done.stderr[-3000:]
        _assert_exact(_copy_table(f"{root}/output", tmp_path / "copy"), _oracle(files[:2]))

        _forget(f"{root}/checkpoint")
        (staged / files[2].name).rename(tmp_path / "landing" / files[2].name)
        recovered = own_process(["recover", str(config), "--apply"])
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        _assert_exact(_copy_table(f"{root}/output", tmp_path / "copy-after"), _oracle(files))
