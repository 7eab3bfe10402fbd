"""The smoke subset: what a user does first, on whatever Spark and Python this runs on.

`make test` runs it on the default Spark (with the whole suite) and, through tools/spark_lines/smoke.py, on every
other supported Spark line (Python 3.11) and every other Python (default Spark). Each test proves one feature of
the README's compatibility table: it works (checked against pandas), or the installed Spark lacks what it needs and
tidemark says so in one line naming the Spark that has it. The tests share one workspace and run in file order:
a pipeline over three files, then inspect and state stats of its checkpoint, then a recovery after the checkpoint
is lost and two more files arrive.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import read_sink, write_config
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import final_windows_oracle, make_events, produce
from tests.oracles import assert_matches_oracle, read_valid_events, window_oracle, window_state_oracle
from tidemark.cli.main import main
from tidemark.pipeline.generate import generate_events
from tidemark.spark.lines import Feature, lacking

pytestmark = [pytest.mark.integration]
HERE = Path(__file__).resolve().parent
WINDOW = timedelta(minutes=15)
WATERMARK = timedelta(minutes=10)


@dataclass(frozen=True)
class Workspace:
    """One pipeline's folder: its config, the files it has read so far and the ones still to come."""

    root: Path
    config: Path
    read: list[Path]
    later: list[Path]

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"


def _release(files: list[Path], landing: Path) -> None:
    for file in files:
        shutil.copy2(file, landing / file.name)
        time.sleep(0.02)  # distinct modification times keep the arrival order


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_naming(err: str, feature: Feature) -> str:
    """The one error line tidemark printed (beside its progress lines); it must name the Spark that has the feature."""
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    needed = lacking(feature)
    assert needed is not None
    assert needed in lines[0], (needed, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Workspace:
    """Five files of events (no very late ones, so batching cannot change the result); three released."""
    root = tmp_path_factory.mktemp("smoke")
    data = generate_events(root / "all", events=300, keys=3, files=5, seed=7, span=timedelta(hours=2))
    files = list(data.files)
    (root / "landing").mkdir()
    _release(files[:3], root / "landing")
    return Workspace(root, _write_config(root, partitions=2), files[:3], files[3:])


def _write_config(root: Path, partitions: int) -> Path:
    # All released files in one batch (fewer batches, a shorter run); the oracle follows the batches.
    return write_config(
        root,
        spark={"shuffle_partitions": partitions},
        source={"max_files_per_trigger": 10},
        checkpoint={"track_state_rows": True},
    )


@pytest.mark.smoke("pipeline")
def test_pipeline_output_equals_the_oracle(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "run", str(workspace.config), "--available-now")
    assert code == 0, err
    expected = window_oracle([workspace.read], window=WINDOW, watermark=WATERMARK)
    assert len(expected) > 10
    assert_matches_oracle(read_sink(workspace.root / "output"), expected)


@pytest.mark.smoke("inspect")
def test_inspect_reads_the_checkpoint(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "checkpoint", "inspect", str(workspace.checkpoint), "--json")
    assert code == 0, err
    report = json.loads(out)
    # The batch that read the files, then the no-data batch that moves the watermark past the last windows.
    assert report["latest_committed_batch"] == report["latest_offset_batch"] == 1
    assert report["state_provider"] is not None and "RocksDB" in report["state_provider"]
    assert [op["id"] for op in report["operators"]] == [0]
    assert not [f for f in report["findings"] if f["severity"] == "error"]


@pytest.mark.smoke("state stats")
def test_state_stats_counts_the_rows_in_state(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], refused: Callable[[str], None]
) -> None:
    code, out, err = _cli(capsys, "state", "stats", str(workspace.checkpoint), "--json")
    if code != 0 and lacking(Feature.STATE_READER) is not None:
        refused(_one_line_naming(err, Feature.STATE_READER))
        return
    assert code == 0, err
    expected = window_state_oracle([workspace.read], window=WINDOW, watermark=WATERMARK)
    assert len(expected) > 0
    stats = json.loads(out)
    assert [(op["id"], op["rows"]) for op in stats["operators"]] == [(0, len(expected))]


@pytest.mark.smoke("check")
def test_check_says_the_config_can_continue(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "check", str(workspace.config), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["compatible"] is True and report["problems"] == []
    assert any(line.startswith("Spark ") and "can continue this checkpoint" in line for line in report["compared"])


@pytest.mark.smoke("state repartition")
def test_repartition_then_continue_equals_the_oracle(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], refused: Callable[[str], None]
) -> None:
    code, _, err = _cli(capsys, "state", "repartition", str(workspace.checkpoint), "--partitions", "3", "--apply")
    if lacking(Feature.STATE_REWRITE) is not None:
        assert code == 1
        refused(_one_line_naming(err, Feature.STATE_REWRITE))
        return
    assert code == 0, err
    # The next file runs on the repartitioned state: every window must still come out once, complete.
    _release(workspace.later[:1], workspace.root / "landing")
    workspace.read.append(workspace.later.pop(0))
    _write_config(workspace.root, partitions=3)  # the count the checkpoint has now
    code, _, err = _cli(capsys, "run", str(workspace.config), "--available-now")
    assert code == 0, err
    expected = window_oracle([workspace.read[:3], workspace.read[3:]], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(read_sink(workspace.root / "output"), expected)


@pytest.fixture
def processors() -> Iterator[None]:
    sys.path.insert(0, str(HERE))
    try:
        yield
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.smoke("custom")
def test_custom_processor_output_equals_pandas(
    tmp_path: Path, processors: None, capsys: pytest.CaptureFixture[str], refused: Callable[[str], None]
) -> None:
    data = generate_events(tmp_path / "landing", events=120, keys=4, files=2, seed=3, span=timedelta(hours=1))
    aggregation = {"kind": "custom", "processor": "smoke_processors:RunningCount", "window": None, "extra": None}
    config = write_config(tmp_path, aggregation=aggregation, source={"max_files_per_trigger": 10})
    code, _, err = _cli(capsys, "run", str(config), "--available-now")
    if lacking(Feature.TRANSFORM_WITH_STATE_PANDAS) is not None:
        assert code == 1
        refused(_one_line_naming(err, Feature.TRANSFORM_WITH_STATE_PANDAS))
        return
    assert code == 0, err
    events = pd.DataFrame(read_valid_events(list(data.files)))
    expected = events.groupby("user").size().sort_index()
    actual = pd.read_parquet(tmp_path / "output").groupby("user")["events"].max().sort_index()
    assert actual.to_dict() == expected.to_dict()


@pytest.mark.reliability(fault="checkpoint lost + recover", storage="local", sink="parquet")
@pytest.mark.smoke("recover")
def test_recover_after_a_lost_checkpoint(workspace: Workspace, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(workspace.checkpoint)  # the fault: the checkpoint is gone, the sink and its log are not
    _release(workspace.later, workspace.root / "landing")
    code, _, err = _cli(capsys, "recover", str(workspace.config), "--apply")
    assert code == 0, err
    everything = [*workspace.read, *workspace.later]
    expected = window_oracle([[f] for f in everything], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(read_sink(workspace.root / "output"), expected)
    # Spark's own reader, through the sink's metadata log, sees the same rows, each once.
    assert spark.read.parquet(str(workspace.root / "output")).count() == len(expected)


@pytest.mark.reliability(fault="checkpoint lost + recover", storage="local", sink="delta")
@pytest.mark.smoke("delta")
def test_delta_sink_output_equals_the_oracle(tmp_path: Path, refused: Callable[[str], None]) -> None:
    """The Delta sink with this line's pinned Delta jars, in its own JVM (this process's session has none); the
    table read with delta-rs. Then the checkpoint is lost, more data lands, and `recover --apply` resumes after the
    newest window the table holds (read through delta-rs): every (key, window) once. A line Delta has no release
    for: one line naming those that have one."""
    import subprocess

    from deltalake import DeltaTable

    from tidemark.spark.artifacts import delta_problem
    from tidemark.spark.lines import installed_version

    data = generate_events(tmp_path / "staged", events=150, keys=3, files=2, seed=5, span=timedelta(hours=1))
    (tmp_path / "landing").mkdir()
    first, later = list(data.files)[:1], list(data.files)[1:]
    _release(first, tmp_path / "landing")
    config = write_config(tmp_path, sink={"format": "delta", "path": "output"}, source={"max_files_per_trigger": 10})

    def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tidemark.cli.main", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=500, check=False)

    done = tidemark("run", str(config), "--available-now")
    problem = delta_problem(installed_version())
    if problem is not None:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and problem in lines[0], done.stderr[-2000:]
        refused(lines[0])
        return
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(tmp_path / "checkpoint")  # the fault: the checkpoint is gone, the table is not
    _release(later, tmp_path / "landing")
    recovered = tidemark("recover", str(config), "--apply")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    actual = DeltaTable(str(tmp_path / "output")).to_pandas()  # delta-rs, a reader independent of the writer
    actual["windowStart"] = pd.to_datetime(actual["windowStart"], utc=True)
    for column in ("windowEnd", "firstEventTime", "lastEventTime"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    expected = window_oracle([first, later], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(actual.sort_values(["user", "windowStart"]).reset_index(drop=True), expected)


@pytest.mark.smoke("iceberg")
def test_iceberg_sink_output_equals_the_oracle(tmp_path: Path, refused: Callable[[str], None]) -> None:
    """The Iceberg sink (a Hadoop catalog on local disk) with this line's pinned Iceberg runtime, in its own JVM (this
    process's session has none); the table read with pyiceberg from its newest metadata file, against the oracle.
    A line Iceberg builds nothing for: one line naming the lines that have a build."""
    import subprocess

    from pyiceberg.table import StaticTable

    from tidemark.spark.artifacts import JarFeature, line_problem
    from tidemark.spark.lines import installed_version

    data = generate_events(tmp_path / "staged", events=150, keys=3, files=2, seed=5, span=timedelta(hours=1))
    (tmp_path / "landing").mkdir()
    _release(list(data.files), tmp_path / "landing")
    sink = {"format": "iceberg", "path": None, "table": "lake.clicks", "catalog": {"warehouse": "warehouse"}}
    config = write_config(tmp_path, sink=sink, source={"max_files_per_trigger": 10})
    command = [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=500, check=False)
    problem = line_problem(JarFeature.ICEBERG, installed_version())
    if problem is not None:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and problem in lines[0], done.stderr[-2000:]
        assert "Spark 3.5, Spark 4.0, Spark 4.1" in lines[0]
        refused(lines[0])
        return
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = tmp_path / "warehouse" / "lake" / "clicks" / "metadata"
    version = int((metadata / "version-hint.text").read_text().strip())
    table = StaticTable.from_metadata(str(metadata / f"v{version}.metadata.json"))  # pyiceberg, not the writer
    actual = table.scan().to_arrow().to_pandas()
    for column in ("windowStart", "windowEnd", "firstEventTime", "lastEventTime"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    expected = window_oracle([list(data.files)], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(actual.sort_values(["user", "windowStart"]).reset_index(drop=True), expected)


@pytest.mark.smoke("connect")
def test_the_pipeline_over_spark_connect_equals_the_oracle(tmp_path: Path, refused: Callable[[str], None]) -> None:
    """`tidemark run` as a client of a Spark Connect server started from this line's own wheel
    (tests/connect_server.py), its progress heard through Connect's listener, the output against the oracle. A line
    whose Connect client hears no listener events (3.5): one line naming the Spark that has it, before any server."""
    import os
    import subprocess

    import pyspark

    from tests.connect_server import start_connect_server, stop_connect_server
    from tests.helpers import progress_lines

    data = generate_events(tmp_path / "staged", events=150, keys=3, files=2, seed=5, span=timedelta(hours=1))
    (tmp_path / "landing").mkdir()
    _release(list(data.files), tmp_path / "landing")
    config = write_config(tmp_path, source={"max_files_per_trigger": 1})

    def run(endpoint: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SPARK_REMOTE": endpoint, "PYSPARK_PYTHON": sys.executable}
        command = [sys.executable, "-m", "tidemark.cli.main", "run", str(config)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=500, check=False)

    if int(pyspark.__version__.split(".")[0]) < 4:
        done = run("sc://127.0.0.1:9")  # nothing listens there: the refusal comes first
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and "needs Spark 4.0 or newer" in lines[0], done.stderr
        refused(lines[0])
        return
    server, process = start_connect_server(tmp_path / "server", [], {})
    try:
        done = run(server.url)
    finally:
        stop_connect_server(process)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"on Spark Connect {server.url}" in done.stderr.splitlines()[0]
    expected = window_oracle([[f] for f in data.files], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(read_sink(tmp_path / "output"), expected)
    heard = [line["progress"]["batchId"] for line in progress_lines(tmp_path / "checkpoint-monitor", "progress")]
    assert sorted(heard) == sorted(int(p.name) for p in (tmp_path / "checkpoint" / "commits").glob("[0-9]*"))


@pytest.mark.smoke("kafka")
def test_kafka_source_output_equals_the_oracle(
    tmp_path: Path, kafka_broker: KafkaBroker, refused: Callable[[str], None]
) -> None:
    """A Kafka pipeline over the tests' broker, in its own JVM with the jars tidemark's lock gives this Spark (its
    own connector, or the nearest locked patch of its line: docs/kafka.md, Jars), against the pandas oracle. A line
    with none locked: the one line that says so, nothing written."""
    import subprocess

    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import served_version
    from tidemark.spark.lines import installed_version

    topic = f"smoke-{installed_version().replace('.', '-')}"
    kafka_broker.create_topic(topic, partitions=2)
    produced = produce(kafka_broker, topic, make_events(150, keys=3, seed=3))
    source = {"format": "kafka", "path": None, "max_files_per_trigger": None}
    source |= {"bootstrap_servers": kafka_broker.bootstrap, "topic": topic}
    config = write_config(tmp_path, source=source)
    command = [sys.executable, "-m", "tidemark.cli.main", "run", str(config), "--available-now"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=500, check=False)
    if served_version(JarFeature.KAFKA, installed_version()) is None:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1 and "no kafka jars" in lines[0], done.stderr[-2000:]
        assert not (tmp_path / "checkpoint").exists()
        refused(lines[0])
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert_matches_oracle(read_sink(tmp_path / "output"), final_windows_oracle(produced))


@pytest.mark.reliability(fault="checkpoint lost + recover", storage="azure abfs", sink="parquet")
@pytest.mark.smoke("abfs")
def test_every_command_on_abfs_over_azurite(
    tmp_path: Path,
    spark: Any,
    abfs_store: Any,
    sql_azurite: Any,
    capsys: pytest.CaptureFixture[str],
    refused: Callable[[str], None],
) -> None:
    """#27, #39: `tidemark run` (its own JVM, as a user types it) with checkpoint and sink on abfs:// over Azurite's
    Blob endpoint, then every tidemark command on those URIs: inspect, prune, state stats, check, audit, and recover
    after the checkpoint is deleted, against the pandas oracle.

    Azurite has no DFS endpoint, but hadoop-azure 3.4.2+ speaks ABFS over the Blob endpoint for accounts without a
    hierarchical namespace (HADOOP-19226) and reaches an emulator through `fs.azure.abfs.endpoint`: tidemark maps the
    connection string to those settings and the account key. The key is never printed (not even with --debug),
    never in Spark's event log (redacted), never on the server, never in the working folder. This Azurite keeps its
    metadata in MariaDB (tests/mariadb.py): every blob Spark left is a row there. On a line whose hadoop-azure has
    no ABFS over the Blob endpoint (3.5, 4.0): the one line naming the Spark that has it, nothing written. The
    in-process commands use the tests' one session, started with the Azure jars (a session started without them
    keeps going without: the CLI names the class it cannot load, tests/unit/test_cli_exit_codes.py).
    """
    import os
    import subprocess

    from tests.storage.spark_stores import cloud_config, delete_tree, raw_sink
    from tidemark.storage import open_storage

    data = generate_events(tmp_path / "all", events=300, keys=3, files=3, seed=11, span=timedelta(hours=2))
    files = list(data.files)
    (tmp_path / "landing").mkdir()
    _release(files[:2], tmp_path / "landing")
    root = abfs_store.new_root()
    event_log = tmp_path / "events"
    event_log.mkdir()
    spark_conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{event_log}",
        "spark.eventLog.compress": "false",
    }
    config = str(cloud_config(tmp_path, root, spark={"conf": spark_conf}))
    work = tmp_path / "cwd"
    work.mkdir()
    connection = abfs_store.env["AZURE_STORAGE_CONNECTION_STRING"]
    key = connection.split("AccountKey=")[1].split(";")[0]
    command = [sys.executable, "-m", "tidemark.cli.main", "--debug", "run", config, "--available-now"]
    env = {**os.environ, **abfs_store.env}
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=500, check=False)
    output = done.stdout + done.stderr
    assert key not in output
    server = open_storage(root)
    if lacking(Feature.ABFS_OVER_BLOB) is not None:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 1 and len(lines) == 1, output[-3000:]
        refused(_one_line_naming(lines[0], Feature.ABFS_OVER_BLOB))
        assert list(server.list_files()) == []
        return
    assert done.returncode == 0, output[-3000:]
    batches = [[f] for f in files[:2]]  # one file a batch (cloud_config's default)
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw"), window_oracle(batches, WINDOW, WATERMARK))

    # The key: in no output, redacted in the event log, on no blob, and nothing in the working folder.
    logs = [p for p in event_log.rglob("*") if p.is_file()]
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in logs)
    assert "fs.azure.account.key.devstoreaccount1.dfs.core.windows.net" in text  # the setting was there...
    assert key not in text  # ...and redacted
    blobs = list(server.list_files())
    for entry in blobs:
        assert key.encode() not in (server.read_bytes(entry.rel) or b""), entry.rel
    assert list(work.iterdir()) == []
    assert sql_azurite.blob_rows() >= len(blobs) > 0  # Azurite's metadata is in MariaDB

    checkpoint = open_storage(f"{root}/checkpoint")
    commits = [int(e.rel.split("/")[1]) for e in checkpoint.list_files("commits") if e.rel.split("/")[1].isdigit()]
    code, out, err = _cli(capsys, "checkpoint", "inspect", f"{root}/checkpoint", "--sink", f"{root}/output", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["latest_committed_batch"] == max(commits) and report["walker"] == "flat"
    assert report["sink"]["latest_batch"] == max(commits)

    before = {e.rel for e in checkpoint.list_files()}
    code, out, err = _cli(capsys, "checkpoint", "prune", f"{root}/checkpoint", "--keep", "1")
    assert code == 0, err
    assert {e.rel for e in checkpoint.list_files()} == before  # a dry run: nothing deleted

    code, out, err = _cli(capsys, "state", "stats", f"{root}/checkpoint", "--json")
    assert code == 0, err
    expected_state = window_state_oracle(batches, window=WINDOW, watermark=WATERMARK)
    assert [(op["id"], op["rows"]) for op in json.loads(out)["operators"]] == [(0, len(expected_state))]

    code, out, err = _cli(capsys, "check", config, "--json")
    assert code == 0, err
    assert json.loads(out)["compatible"] is True

    code, out, err = _cli(capsys, "audit", config)
    assert code == 0, err

    # The checkpoint is lost (every blob under it, ABFS's folder markers too, as deleting the folder in Azure's
    # tools does), a third file arrives: recover continues exactly once, on the store.
    delete_tree(f"{root}/checkpoint")
    assert list(checkpoint.list_files()) == []
    _release(files[2:], tmp_path / "landing")
    code, _, err = _cli(capsys, "recover", config, "--apply")
    assert code == 0, err
    everything = window_oracle([[f] for f in files], window=WINDOW, watermark=WATERMARK)
    assert_matches_oracle(raw_sink(f"{root}/output", tmp_path / "raw-after"), everything)


@pytest.mark.reliability(fault="driver kill", storage="azure abfs", sink="delta")
@pytest.mark.reliability(fault="checkpoint lost + recover", storage="azure abfs", sink="delta")
@pytest.mark.smoke("delta abfs")
def test_delta_sink_on_abfs_is_exact_through_a_kill_and_a_lost_checkpoint(
    tmp_path: Path, abfs_store: Any, refused: Callable[[str], None]
) -> None:
    """#58: the Delta sink with checkpoint and table on abfs:// over Azurite's Blob endpoint (the only Azure scheme of
    Spark 4.2/4.3), each command in its own JVM with this line's Delta jars. A run is killed right after batch 1's
    Delta commit and before Spark's `commits/1`, a rerun finishes (the replayed batch skipped by the table's
    transaction); then the checkpoint is deleted on the server, a third file lands and `recover --apply` resumes. The
    table, copied off the server file by file and read with delta-rs, equals the pandas oracle, nothing twice. A line
    without ABFS over the Blob endpoint, or without a Delta release: one line naming what it lacks, nothing written."""
    from tests.integration.test_delta_sink import _assert_exact, _run
    from tests.integration.test_delta_sink import _cli as own_process
    from tests.storage.spark_stores import cloud_config, delete_tree, events, oracle
    from tests.storage.test_delta_on_stores import _copy_table
    from tidemark.spark.artifacts import delta_problem
    from tidemark.spark.lines import installed_version
    from tidemark.storage import open_storage

    data = events(tmp_path, files=3)  # one file a batch
    files = list(data.files)
    staged = tmp_path / "staged"
    staged.mkdir()
    files[2].rename(staged / files[2].name)  # lands after the checkpoint is lost
    root = abfs_store.new_root()
    config = cloud_config(tmp_path, root, sink={"format": "delta", "path": f"{root}/output"})
    server = open_storage(root)

    killed = _run(config, kill_after_batch=1)
    errors = [line for line in killed.stderr.splitlines() if line.startswith("error:")]
    abfs_missing, delta_missing = lacking(Feature.ABFS_OVER_BLOB), delta_problem(installed_version())
    if abfs_missing is not None or delta_missing is not None:
        assert killed.returncode == 1 and len(errors) == 1, killed.stderr[-3000:]
        if abfs_missing is not None:
            refused(_one_line_naming(errors[0], Feature.ABFS_OVER_BLOB))
        else:
            assert delta_missing is not None and delta_missing in errors[0], errors
            refused(errors[0])
        assert list(server.list_files()) == []
        return
    assert killed.returncode == -9, killed.stderr[-3000:]
    checkpoint = open_storage(f"{root}/checkpoint")
    assert {e.rel for e in checkpoint.list_files() if e.rel.startswith("commits/")} == {"commits/0"}
    done = _run(config)
    assert done.returncode == 0, done.stderr[-3000:]
    first_two = window_oracle([[f] for f in files[:2]], window=WINDOW, watermark=WATERMARK)
    _assert_exact(_copy_table(f"{root}/output", tmp_path / "copy"), first_two)

    delete_tree(f"{root}/checkpoint")
    assert list(checkpoint.list_files()) == []
    (staged / files[2].name).rename(tmp_path / "landing" / files[2].name)
    recovered = own_process(["recover", str(config), "--apply"])
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    _assert_exact(_copy_table(f"{root}/output", tmp_path / "copy-after"), oracle(data))
