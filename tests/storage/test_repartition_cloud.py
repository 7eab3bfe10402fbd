"""Issue #39: `state repartition` where checkpoints live. Spark writes a pipeline's checkpoint and sink on a store
(wasbs:// and abfs:// on Azurite, the two Azure schemes Spark 4.1 offers), tidemark repartitions the checkpoint
there, and the next run continues it: the output equals the pandas oracle of every event, the next
batches record the new partition count, the old checkpoint is archived beside it. The same killed in each of its
phases, on abfs:// and on moto's S3 (whose in-place repartition is proven there, after its kills):
tests/storage/test_repartition_kills.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.oracles import assert_matches_oracle
from tests.servers import SparkStore
from tests.storage.spark_stores import cloud_config, oracle, raw_sink
from tidemark.config import load_config
from tidemark.evolve.repartition import repartition_checkpoint
from tidemark.formats import SHUFFLE_PARTITIONS, Checkpoint
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
