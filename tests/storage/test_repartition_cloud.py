"""Issue #39: `state repartition` where checkpoints live. Spark writes a pipeline's checkpoint and sink on a store
(s3a:// on moto; wasbs:// and abfs:// on Azurite, the two Azure schemes Spark 4.1 offers), tidemark repartitions
the checkpoint there, and the next run continues it: the output equals the pandas oracle of every event, the next
batches record the new partition count, the old checkpoint is archived beside it. On S3 the swap is killed
(SIGKILL) after a random number of object moves: the next `run` finishes it first and continues exactly.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.oracles import assert_matches_oracle
from tests.servers import SparkStore
from tests.storage.spark_stores import cloud_config, oracle, raw_sink
from tidemark.compat import UTC
from tidemark.config import load_config
from tidemark.evolve.repartition import repartition_checkpoint
from tidemark.formats import SHUFFLE_PARTITIONS, Checkpoint, swap_names
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage, parse_location

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NEW_PARTITIONS = 3


def _files(uri: str) -> set[str]:
    return {e.rel for e in open_storage(uri).list_files("")}


def _run_half_then_repartition_then_rest(
    store: SparkStore, spark: Any, tmp_path: Path, repartition: Any
) -> tuple[str, Any]:
    """Run the pipeline over the first file on the store, `repartition(checkpoint_uri)`, land the second, run
    again; return the store root and the events."""
    data = generate_events(tmp_path / "all", events=300, keys=4, files=2, seed=39)
    landing = tmp_path / "landing"
    landing.mkdir()
    for file in data.files[:1]:
        shutil.copy2(file, landing / Path(file).name)
    root = store.new_root()
    config = load_config(cloud_config(tmp_path, root))
    run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
    checkpoint = f"{root}/checkpoint"
    before = Checkpoint.open(checkpoint).latest_committed_batch()
    repartition(checkpoint)
    for file in data.files[1:]:
        shutil.copy2(file, landing / Path(file).name)
    run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])
    after = Checkpoint.open(checkpoint)
    newest = after.latest_committed_batch()
    assert newest > before + 1, "the run after the repartition committed no batch"
    assert after.offset(newest).conf[SHUFFLE_PARTITIONS] == str(NEW_PARTITIONS)
    return root, data


@pytest.mark.parametrize("scheme", ["wasb", "abfs"])
def test_repartition_in_place_on_azure_then_continue_exactly(
    scheme: str, request: pytest.FixtureRequest, spark: Any, tmp_path: Path
) -> None:
    store: SparkStore = request.getfixturevalue(f"{scheme}_store")
    archives: list[str] = []

    def repartition(checkpoint: str) -> None:
        if scheme == "abfs":  # the dry run reads and writes nothing (once: it costs a state read)
            before = _files(parse_location(checkpoint).parent.uri)
            dry = repartition_checkpoint(checkpoint, NEW_PARTITIONS)
            assert not dry.applied and dry.stores and _files(parse_location(checkpoint).parent.uri) == before
        report = repartition_checkpoint(checkpoint, NEW_PARTITIONS, apply=True)
        assert report.applied and report.verification is not None and report.archive is not None
        archives.append(report.archive)

    root, data = _run_half_then_repartition_then_rest(store, spark, tmp_path, repartition)
    assert _files(archives[0]), "the old checkpoint was not archived"
    assert not any("journal-" in rel for rel in _files(f"{root}/.tidemark-archive"))
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "sink"), oracle(data))


_SWAP_KILLED = """
import os, signal
from datetime import datetime
from tidemark.storage import journal
from tidemark.storage.uri import parse_location
from tidemark.formats import swap_in
count = {{"n": 0}}
real_copy = journal._copy
def copy(*args):
    count["n"] += 1
    if count["n"] > {after}:
        os.kill(os.getpid(), signal.SIGKILL)
    real_copy(*args)
journal._copy = copy
location = parse_location({checkpoint!r})
swap_in(location, parse_location({archive!r}), parse_location({staging!r}))
"""


def test_a_swap_killed_on_s3_is_finished_by_the_next_run_which_continues_exactly(
    s3a_store: SparkStore, spark: Any, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("TIDEMARK_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30)))

    def repartition(checkpoint: str) -> None:
        location = parse_location(checkpoint)
        archive, staging = swap_names(location, datetime.now(tz=UTC))
        # Written and verified beside the checkpoint, as --apply does before its swap; the checkpoint untouched.
        before = {rel: open_storage(checkpoint).read_bytes(rel) for rel in _files(checkpoint)}
        report = repartition_checkpoint(checkpoint, NEW_PARTITIONS, apply=True, to=staging.uri)
        assert report.verification is not None and _files(staging.uri)
        assert {rel: open_storage(checkpoint).read_bytes(rel) for rel in _files(checkpoint)} == before
        objects = len(before) + len(_files(staging.uri))
        after = rng.randrange(1, objects - 1)
        print(f"the swap dies after {after} of {objects} object copies")
        script = _SWAP_KILLED.format(after=after, checkpoint=checkpoint, archive=archive.uri, staging=staging.uri)
        done = subprocess.run([sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, check=False)
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
        assert [r for r in _files(f"{location.parent.uri}/.tidemark-archive") if "journal-" in r]
        # every object is in its old place or its new one, none lost
        moved = _files(f"{archive.uri}")
        assert set(before) <= set(moved) | _files(checkpoint) | _files(staging.uri)

    root, data = _run_half_then_repartition_then_rest(s3a_store, spark, tmp_path, repartition)
    assert not any("journal-" in rel for rel in _files(f"{root}/.tidemark-archive"))
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "sink"), oracle(data))
