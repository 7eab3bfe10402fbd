"""Issue 14: a pipeline whose quarantine and progress-log folder are wasbs:// and s3a:// URIs writes them on the
server (read back through tidemark, analysed there) and leaves nothing new in the working folder.

The checkpoint and sink stay on file://; the quarantine (which Spark writes itself above 10,000 records a batch)
and the progress log go to the store. On Azure that is wasbs:// through hadoop-azure's emulator mode, which reaches
Azurite only at 127.0.0.1:10000 (the wasb_store fixture's proxy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import read_sink, write_config
from tidemark.config import load_config
from tidemark.formats import progress_log_files
from tidemark.monitor.analyze import analyze
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.quarantine import read_quarantine
from tidemark.pipeline.run import run_pipeline
from tidemark.recovery.failover import Failover
from tidemark.storage import open_storage

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("kind", ["azure", "s3"])
def test_quarantine_and_progress_log_on_a_store(
    spark: Any, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if kind == "azure":
        root = request.getfixturevalue("wasb_store").new_root()
    else:
        moto = request.getfixturevalue("s3_env")
        root = f"s3a://{moto.new_bucket()}/job"
    data = generate_events(tmp_path / "landing", events=300, keys=3, files=3, seed=4, malformed_fraction=0.05)
    assert data.malformed_lines > 0
    config_path = write_config(
        tmp_path,
        source={"path": str(tmp_path / "landing")},
        sink={"path": str(tmp_path / "output")},
        checkpoint={"location": str(tmp_path / "checkpoint")},
        quarantine={"path": f"{root}/quarantine"},
        monitor={"dir": f"{root}/monitor"},
    )
    config = load_config(config_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    result = run_pipeline(config, spark=spark, available_now=True, prestarts=[Failover()])

    assert list(work.iterdir()) == []  # nothing written locally under a URI-shaped name
    assert not (tmp_path / "s3a:").exists() and not (tmp_path / "wasbs:").exists()
    records = read_quarantine(f"{root}/quarantine")
    assert len(records) == data.malformed_lines == result.quarantined
    on_server = {e.rel for e in open_storage(f"{root}/quarantine").list_files()}
    assert any(rel.startswith("batch-") for rel in on_server) and "_last_batch" in on_server
    logs = progress_log_files(f"{root}/monitor")
    assert logs and all(uri.startswith(root) for uri in logs)
    analysis = analyze(f"{root}/monitor")
    assert analysis.runs and analysis.runs[-1].batches == result.batches
    assert len(read_sink(tmp_path / "output")) > 0
