"""Benchmark: the seed incident (a first batch stuck for hours after a restart, its checkpoint on Azure Blob holding
millions of small state files) reproduced on Azurite through hadoop-azure's WASB driver, and cured with what
tidemark advises. Issue 27.

Run by hand:

    .venv/bin/python benchmarks/seed_incident.py --work /tmp/seed [--versions 1000] [--chain 100] [--latency-ms 20]

Needs 127.0.0.1:10000 free (hadoop-azure's emulator mode connects there; a latency proxy of this script owns it
and Azurite sits behind it on a free port). Each phase runs in its own process (its own JVM), so state store
maintenance settings of one phase never leak into the next. By default one in-memory Azurite, started by this
process, serves every phase (every phase reruns); with --persist each phase starts Azurite on <work>/azurite and
phases are resumable (each writes <work>/<phase>.json and is skipped when that file exists), but Azurite then
needs minutes to load 200,000 blobs at every start.

The server (--store): `sql` (default, issue 39) is Azurite on its SQL metadata store backed by a MariaDB this
script starts in <work>/server (tests/mariadb.py, `make mariadb`), whose cost per request does not grow with the
container (BENCHMARKS.md, "Azurite on its SQL store"); there the synth phase uploads one empty delta over REST
and makes the other ~200,000 as copies of its metadata row in MariaDB (the same bytes; REST would take an hour).
`memory` is the LokiJS store of issue 27's runs (its cost per request grows with the blobs in the account).

Phases:
  grow     Spark writes the real part: a windowed aggregation (15-minute windows, 10-minute watermark, sum),
           the HDFS-backed state store, 200 shuffle partitions, checkpoint and sink on
           wasbs://seed@devstoreaccount1.blob.core.windows.net/job (WASB emulator mode), one landing file a
           batch. Maintenance runs every second with minDeltasForSnapshot 0, so every partition ends with a
           snapshot of its last version (Spark's own file).
  synth    The faster route to the seed's size: batches L+1 .. versions-1 that read no data (offsets and commits
           copied from Spark's last batch, the sink log's empty entries and compactions as Spark writes them),
           one empty delta per partition and version (the bytes Spark's own LZ4 codec writes for "no change",
           made through the JVM), and each partition's last snapshot copied to version versions-chain: the
           history a store whose maintenance stopped keeping up (snapshots written once, old files never
           deleted) leaves. Uploaded straight to Azurite (no latency). Then Spark's own `statestore` reader
           proves them readable: the state at the last batch equals the state at the last real batch, and two
           partitions read from their first snapshot through every synthetic delta. With --twin the chain is
           shaped like one Spark grew: each partition's newest real delta and its `.crc` (Spark 4.1's checksum
           file) copied to every synthetic version instead of an empty delta (re-applying it changes nothing, so
           the proof holds), the snapshot's `.crc` too, and a file-source log entry for each batch (its offset
           moving with it, the entry naming the last landing file).
  chain    Only with --real-chain N (the real-versus-synthetic row): N more landing files, one a batch, run by Spark
           with maintenance off, so every partition's chain after grow's snapshot is Spark's own deltas; synth
           then does nothing.
  fork     (--store sql) the grown job, checkpoint and sink, copied to job-prune/ and job-store/ as copies of
           Azurite's metadata rows, before anything restarts it: the decomposition restarts one checkpoint four
           ways.
  before   A new landing file, and `tidemark run --available-now` through the proxy (every request held
           --latency-ms): the first batch after the restart loads each partition from its snapshot through
           `chain` deltas. Measured: wall time from the run's start to the PUT of that batch's commit, the
           requests by kind until then (list, read, metadata, write, delete), Spark's own batch duration.
           Maintenance interval 1 h: the measured window is the restart alone.
  prune_only  (b) tidemark's retention and prune alone on job-prune/ (`checkpoint prune --keep 10 --apply`, the sink's
           log too; the same HDFS store and partitions), then the restart of `before` (its new file) measured the
           same way, and the sink against the pandas oracle.
  store_only  (c) the store change alone on job-store/: `state repartition` to the same partitions with
           `--state-store rocksdb` (no prune), then the same restart on RocksDB with changelog checkpointing.
  inspect  `checkpoint inspect` through the proxy against a per-folder walk (one delimiter listing per folder,
           what Hadoop's FileSystem listing does) of the same checkpoint: requests and time.
  cure     What inspect advises: `checkpoint prune --keep 10 --apply` (batched deletes), then
           `state repartition --partitions 4 --state-store rocksdb --apply` where the checkpoint lives (tidemark
           rewrites and verifies it locally, uploads it beside the old one and swaps the two by a journaled pair
           of folder moves), and the config switched to RocksDB with changelog checkpointing.
  after    Another landing file, the same run on the cured checkpoint, measured as in `before`; then the whole
           sink (every Parquet file on the server) against the pandas oracle of every landing file.
Prints and writes <work>/result.json, with `decomposition`: each restart's first batch against `before`'s, and
`before`'s requests per replayed delta (run once with --real-chain N and once with a synthetic chain of the same
shape, --versions <grown batches + C + 1> --chain C with C the real run's chain.json chain, to compare the two).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fault_proxy import FaultProxy, Request  # noqa: E402
from tests.helpers import write_config  # noqa: E402
from tests.servers import ACCOUNT, AZURITE_BIN, _stop, azurite_account_key, free_port  # noqa: E402

PORT = 10000
CONTAINER = "seed"
FQDN = f"{ACCOUNT}.blob.core.windows.net"
JOB = f"wasbs://{CONTAINER}@{FQDN}/job"
PARTITIONS = 200
SLOTS = 4  # Spark task slots (local[N]); the requests wait on latency, so more slots than cores still gain
REAL_FILES = 4  # landing files of the grow phase; two more come later (before, after)
EVENTS_PER_FILE = 2500
KEYS = 400
# The seed incident decomposed (issue 58): the grown checkpoint is forked before its first restart (copies of
# Azurite's metadata rows: the same bytes), and each fork restarts with one of the cure's changes alone, beside
# `before` (the seed's setup) and `cure` + `after` (all of them).
FORKS = {"prune_only": "job-prune", "store_only": "job-store"}
PHASES = ("grow", "chain", "synth", "fork", "before", "prune_only", "store_only", "inspect", "cure", "after")


# --- servers ----------------------------------------------------------------------------------------------------


def start_azurite(work: Path, *, persist: bool) -> tuple[subprocess.Popen[bytes], int]:
    """Azurite on a free port: in memory (one process serves every phase: loading 200,000 blobs from disk takes
    minutes) or, with persist, keeping its data in work/azurite."""
    port = free_port()
    log = work / "azurite.log"
    command = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--disableTelemetry"]
    command += ["--skipApiVersionCheck"]
    if persist:
        (work / "azurite").mkdir(parents=True, exist_ok=True)
        command += ["--location", str(work / "azurite")]
    else:
        command += ["--inMemoryPersistence"]
    with log.open("ab") as out:
        azurite = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(port, azurite, log)
    return azurite, port


@contextmanager
def servers(work: Path, latency: float) -> Iterator[tuple[FaultProxy, str]]:
    """Azurite (the parent's, SEED_AZURITE_PORT, or one of this process) on a free port, the proxy on 10000 in
    front; yields (proxy, connection)."""
    azurite: subprocess.Popen[bytes] | None = None
    if os.environ.get("SEED_AZURITE_PORT"):
        port = int(os.environ["SEED_AZURITE_PORT"])
    else:
        azurite, port = start_azurite(work, persist=True)
    proxy = FaultProxy(PORT, port, latency=latency)
    try:
        proxy.start()
        key = azurite_account_key()
        endpoint = f"http://127.0.0.1:{PORT}/{ACCOUNT}"
        yield (
            proxy,
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};",
        )
    finally:
        proxy.stop()
        if azurite is not None:
            _stop(azurite)


def wait_for(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Azurite loads its whole database from --location before it listens: minutes at 200,000 blobs."""
    import socket

    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"azurite exited with {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(1)
    raise RuntimeError("azurite did not listen within 30 minutes")


def direct_connection(proxy: FaultProxy) -> str:
    """A connection string straight to Azurite (around the proxy): for setup, never for what is measured."""
    endpoint = f"http://127.0.0.1:{proxy.upstream_port}/{ACCOUNT}"
    key = azurite_account_key()
    return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={endpoint};"


class Uploader:
    """PUT Blob with a container SAS over keep-alive connections: ~10x fewer client CPU than the SDK per blob."""

    def __init__(self, port: int) -> None:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        from tidemark.compat import UTC

        self.port = port
        permission = ContainerSasPermissions(read=True, write=True, create=True, list=True, delete=True)
        expiry = datetime.now(tz=UTC) + timedelta(hours=12)
        self.sas = generate_container_sas(
            ACCOUNT, CONTAINER, account_key=azurite_account_key(), permission=permission, expiry=expiry
        )
        self.local = threading.local()

    def put(self, name: str, data: bytes) -> None:
        from urllib.parse import quote

        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = self.local.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"x-ms-blob-type": "BlockBlob", "x-ms-version": "2021-08-06", "Content-Length": str(len(data))}
        for attempt in range(5):
            try:
                connection.request(
                    "PUT", f"/{ACCOUNT}/{CONTAINER}/{quote(name)}?{self.sas}", body=data, headers=headers
                )
                answer = connection.getresponse()
                answer.read()
                if answer.status == 201:
                    return
                raise RuntimeError(f"PUT {name}: HTTP {answer.status} {answer.reason}")
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = self.local.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt == 4:
                    raise
                time.sleep(1)

    def put_all(self, items: Iterator[tuple[str, bytes]], threads: int = 8) -> int:
        count = 0
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(lambda item: self.put(*item), items):
                count += 1
                if count % 10000 == 0:
                    print(f"  uploaded {count}", file=sys.stderr, flush=True)
        return count


# --- configs ----------------------------------------------------------------------------------------------------


def config(work: Path, phase: str, *, cured: bool = False, root: str = JOB, rocksdb: bool | None = None) -> Path:
    """The pipeline config of a phase (one folder per phase so each keeps its own): the seed's setup (HDFS store,
    PARTITIONS), or cured (RocksDB with changelog, 4 partitions); root: the job's folder (a fork's);
    rocksdb: the store alone, at the seed's partitions (the store_only fork)."""
    folder = work / "configs" / phase
    folder.mkdir(parents=True, exist_ok=True)
    on_rocksdb = cured if rocksdb is None else rocksdb
    conf: dict[str, str] = {"spark.sql.adaptive.enabled": "false"}
    if phase == "grow":
        conf["spark.sql.streaming.stateStore.maintenanceInterval"] = "1s"
        conf["spark.sql.streaming.stateStore.minDeltasForSnapshot"] = "0"
    elif not on_rocksdb:
        # The measured window is the restart; in `chain`, no maintenance means no snapshot: every batch's delta
        # stays in the chain a restart replays.
        conf["spark.sql.streaming.stateStore.maintenanceInterval"] = "1h"
    checkpoint: dict[str, Any] = {
        "location": f"{root}/checkpoint",  # the cure repartitions it in place
        "state_store": "rocksdb" if on_rocksdb else "hdfs",
        "changelog": on_rocksdb,
        "min_batches_to_retain": 100,  # Spark's default, as the seed ran
    }
    return write_config(
        folder,
        pipeline={"name": "seed"},
        spark={
            "master": f"local[{SLOTS}]",
            "shuffle_partitions": 4 if cured else PARTITIONS,  # a restart keeps the checkpoint's own
            "driver_memory": "2g",
            "conf": conf,
        },
        source={"path": str(work / "landing"), "max_files_per_trigger": 1},
        sink={"path": f"{root}/output"},
        checkpoint=checkpoint,
        quarantine={"path": str(work / "quarantine")},
        monitor={"dir": str(work / "monitor")},
        trigger={"mode": "processing-time" if phase == "grow" else "available-now", "interval": "1 second"},
    )


def session(config_path: Path) -> Any:
    from tidemark.config import load_config
    from tidemark.needs import session_conf
    from tidemark.session import build_session

    settings = load_config(config_path)
    return build_session(settings.spark.master, session_conf(settings), app_name="tidemark-seed-incident")


# --- helpers ----------------------------------------------------------------------------------------------------


def blobs(prefix: str) -> list[tuple[str, int]]:
    from tidemark.storage import open_storage

    return [(e.rel, e.size) for e in open_storage(prefix).list_files()]


def landing_files(work: Path) -> list[Path]:
    """In arrival order (the generator gives each file a later modification time)."""
    return sorted((work / "landing").glob("*.json"), key=lambda p: p.stat().st_mtime)


def release_file(work: Path, index: int) -> Path:
    """Move staged landing file number index into the landing folder (the source sees it as new)."""
    staged = sorted((work / "staged").glob("*.json"), key=lambda p: p.stat().st_mtime)[index]
    target = work / "landing" / staged.name
    shutil.copy2(staged, target)
    return target


def release_next(work: Path) -> Path:
    """The next staged file into the landing folder: the one new file a measured restart reads."""
    return release_file(work, len(landing_files(work)))


def check_sink(work: Path, root: str, label: str) -> dict[str, Any]:
    """Every Parquet file under root/output, copied off the server, against the pandas oracle of every landing file
    the job read so far (one file a batch)."""
    from tests.oracles import assert_matches_oracle, window_oracle
    from tests.storage.spark_stores import raw_sink

    raw = work / f"{label}-sink"
    if raw.exists():
        shutil.rmtree(raw)
    actual = raw_sink(f"{root}/output", raw)
    expected = window_oracle(
        [[f] for f in landing_files(work)], window=timedelta(minutes=15), watermark=timedelta(minutes=10)
    )
    assert_matches_oracle(actual, expected)
    return {"rows": len(expected), "equal": True, "sink_rows": len(actual)}


def measured_run(work: Path, config_path: Path, proxy: FaultProxy) -> dict[str, Any]:
    """Run available-now; time and count requests until the first batch's commit reaches the proxy."""
    from tidemark.config import load_config
    from tidemark.formats import Checkpoint
    from tidemark.pipeline.run import run_pipeline
    from tidemark.recovery.failover import Failover

    settings = load_config(config_path)
    first_batch = (Checkpoint.open(settings.checkpoint.location).latest_committed_batch() or 0) + 1
    spark = session(config_path)
    marks: dict[str, Any] = {}
    progress: list[dict[str, Any]] = []

    def at_commit(request: Request) -> bool:
        if "at" not in marks:
            marks["at"] = time.monotonic()
            marks["counts"] = dict(proxy.counts)
        return False

    proxy.on("PUT", rf"/checkpoint(-cured)?/commits/{first_batch}$", at_commit)
    proxy.reset_counts()
    started = time.monotonic()
    result = run_pipeline(
        settings, spark=spark, available_now=True, on_progress=progress.append, prestarts=[Failover()]
    )
    ended = time.monotonic()
    proxy.clear_hooks()
    first = next((p for p in progress if int(p.get("batchId", -1)) == first_batch), {})
    return {
        "first_batch": first_batch,
        "first_batch_wall_s": round(marks["at"] - started, 1) if "at" in marks else None,
        "requests_until_first_commit": marks.get("counts"),
        "first_batch_duration_ms": first.get("durationMs"),
        "run_wall_s": round(ended - started, 1),
        "batches": result.batches,
        "requests_whole_run": dict(proxy.counts),
    }


# --- phases -----------------------------------------------------------------------------------------------------


def phase_grow(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    from tidemark.config import load_config
    from tidemark.pipeline.generate import generate_events
    from tidemark.pipeline.run import run_pipeline

    with suppress(ResourceExistsError):
        BlobServiceClient.from_connection_string(direct_connection(proxy)).create_container(CONTAINER)
    files = REAL_FILES + args.real_chain + 2  # the grown part, a real chain (`chain`), before's file and after's
    generate_events(work / "staged", events=EVENTS_PER_FILE * files, keys=KEYS, files=files, seed=27)
    (work / "landing").mkdir(exist_ok=True)
    for index in range(REAL_FILES):
        release_file(work, index)
    config_path = config(work, "grow")
    spark = session(config_path)
    stop = threading.Event()
    started = time.monotonic()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = run_pipeline(load_config(config_path), spark=spark, stop=stop)
        except Exception as exc:  # reported below
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    latest = None
    while thread.is_alive() and time.monotonic() - started < 7200:
        time.sleep(10)
        names = {rel for rel, _ in blobs(f"{JOB}/checkpoint")}
        commits = sorted(int(n.split("/")[1]) for n in names if n.startswith("commits/") and n.split("/")[1].isdigit())
        if len(commits) < REAL_FILES + 1:  # the data batches and the no-data batch that closes the windows
            continue
        latest = commits[-1]
        snapshots = {n.split("/")[2] for n in names if n.endswith(f"/{latest + 1}.snapshot")}
        print(f"  grow: batch {latest}, {len(snapshots)} snapshots of version {latest + 1}", file=sys.stderr)
        if len(snapshots) == PARTITIONS:
            break
    stop.set()
    thread.join()
    if "error" in box:
        raise box["error"]
    # The last batch may have run after the check: keep only what the final state says.
    names = {rel for rel, _ in blobs(f"{JOB}/checkpoint")}
    commits = sorted(int(n.split("/")[1]) for n in names if n.startswith("commits/") and n.split("/")[1].isdigit())
    latest = commits[-1]
    missing = [p for p in range(PARTITIONS) if f"state/0/{p}/{latest + 1}.snapshot" not in names]
    if missing:
        raise RuntimeError(f"partitions without a snapshot of version {latest + 1}: {missing[:10]}")
    return {"real_batches": latest + 1, "last_real_batch": latest, "seconds": round(time.monotonic() - started, 1)}


def phase_chain(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    """With --real-chain N: N more landing files, one a batch, run by Spark with maintenance off, so each partition's
    chain after grow's snapshot is N+ real deltas (the row a synthetic chain of the same shape is compared with)."""
    from tidemark.config import load_config
    from tidemark.pipeline.run import run_pipeline

    if args.real_chain == 0:
        return {"skipped": "no --real-chain: the chain is synth's"}
    grown = json.loads((work / "grow.json").read_text())
    snapshot = int(grown["last_real_batch"]) + 1
    for _ in range(args.real_chain):
        release_next(work)
    config_path = config(work, "chain")
    started = time.monotonic()
    result = run_pipeline(load_config(config_path), spark=session(config_path), available_now=True)
    names = {rel for rel, _ in blobs(f"{JOB}/checkpoint")}
    last = max(int(n.split("/")[1]) for n in names if n.startswith("commits/") and n.split("/")[1].isdigit())
    snapshots = sorted({int(n.rsplit("/", 1)[1].split(".")[0]) for n in names if n.endswith(".snapshot")})
    if snapshots[-1] != snapshot:
        raise RuntimeError(f"snapshots of versions {snapshots}: the chain must start at grow's newest ({snapshot})")
    return {
        "batches": result.batches,
        "last_batch": last,
        "snapshot_version": snapshot,
        "chain": last + 1 - snapshot,  # the deltas a restart at version last+1 replays in each partition
        "seconds": round(time.monotonic() - started, 1),
    }


def empty_delta(spark: Any) -> bytes:
    """What HDFSBackedStateStoreProvider writes for a version without changes: the end marker (-1) through
    Spark's own compression codec (the session's spark.sql.streaming.stateStore.compression.codec)."""
    jvm = spark.sparkContext._jvm
    codec_name = spark.conf.get("spark.sql.streaming.stateStore.compression.codec", "lz4")
    codec = jvm.org.apache.spark.io.CompressionCodec.createCodec(spark.sparkContext._jsc.sc().conf(), codec_name)
    buffer = jvm.java.io.ByteArrayOutputStream()
    out = jvm.java.io.DataOutputStream(codec.compressedOutputStream(buffer))
    out.writeInt(-1)
    out.close()
    return bytes(buffer.toByteArray())


def phase_synth(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    from tidemark.storage import open_storage

    if args.real_chain:
        return {"skipped": "--real-chain: the chain is Spark's own"}
    grown = json.loads((work / "grow.json").read_text())
    last = int(grown["last_real_batch"])
    versions, chain = args.versions, args.chain
    snapshot_at = versions - chain
    if snapshot_at <= last + 1:
        raise SystemExit(f"--versions {versions} with --chain {chain} leaves no synthetic history")
    spark = session(config(work, "before"))
    delta = empty_delta(spark)
    checkpoint = open_storage(f"{JOB}/checkpoint")
    sink_log = open_storage(f"{JOB}/output/_spark_metadata")
    offset_lines = (checkpoint.read_bytes(f"offsets/{last}") or b"").decode().split("\n")
    twin = Twin.read(checkpoint, last) if args.twin else None
    commit = checkpoint.read_bytes(f"commits/{last}") or b""
    meta = json.loads(offset_lines[1])
    # The sink log: every file Spark wrote, as its latest compaction and the plain entries after it list them.
    entries = sorted(int(r.split(".")[0]) for r, _ in blobs(f"{JOB}/output/_spark_metadata"))
    lines: list[str] = []
    for batch in entries:
        name = f"{batch}.compact" if (batch + 1) % 10 == 0 else str(batch)
        body = (sink_log.read_bytes(name) or b"").decode().split("\n")[1:]
        lines = [ln for ln in body if ln] if name.endswith(".compact") else lines + [ln for ln in body if ln]
    snapshots = {p: checkpoint.read_bytes(f"state/0/{p}/{last + 1}.snapshot") for p in range(PARTITIONS)}

    def items() -> Iterator[tuple[str, bytes]]:
        for batch in range(last + 1, versions):
            meta["batchTimestampMs"] = int(meta["batchTimestampMs"]) + 1000
            sources = offset_lines[2:] if twin is None else [twin.offset(batch), *offset_lines[3:]]
            body = "\n".join([offset_lines[0], json.dumps(meta, separators=(",", ":")), *sources])
            yield f"job/checkpoint/offsets/{batch}", body.encode()
            yield f"job/checkpoint/commits/{batch}", commit
            if (batch + 1) % 10 == 0:
                yield f"job/output/_spark_metadata/{batch}.compact", "\n".join(["v1", *lines]).encode()
            else:
                yield f"job/output/_spark_metadata/{batch}", b"v1"
            if twin is not None:
                yield twin.source_entry(batch)
            for partition in range(PARTITIONS):
                for name, data in twin.deltas(partition, batch + 1) if twin else [(f"{batch + 1}.delta", delta)]:
                    yield f"job/checkpoint/state/0/{partition}/{name}", data
        for partition, data in snapshots.items():
            yield f"job/checkpoint/state/0/{partition}/{snapshot_at}.snapshot", data or b""
            if twin is not None and twin.snapshot_crc(partition) is not None:
                yield f"job/checkpoint/state/0/{partition}/{snapshot_at}.snapshot.crc", twin.snapshot_crc(partition)

    socket = os.environ.get("SEED_MARIADB_SOCKET")
    started = time.monotonic()
    uploader = Uploader(proxy.upstream_port)
    if socket and twin is not None:  # each partition's own last delta (and .crc): copies of its metadata rows
        uploaded = uploader.put_all(item for item in items() if not item[0].endswith(twin.suffixes))
        for suffix in twin.suffixes:
            uploaded += copy_partition_files(Path(socket), suffix, source=last + 1, first=last + 2, last=versions)
    elif socket:  # the SQL store: one empty delta over REST, the rest as copies of its metadata row in MariaDB
        seed = f"job/checkpoint/state/0/0/{last + 2}.delta"
        uploader.put(seed, delta)
        uploaded = uploader.put_all(item for item in items() if not item[0].endswith(".delta")) + 1
        uploaded += copy_deltas(Path(socket), seed, first=last + 2, last=versions)
    else:
        uploaded = uploader.put_all(items())
    upload_s = time.monotonic() - started
    # The history is one tidemark ran: its quarantine marker is at the newest batch, as the run that committed it
    # left it. (Until 2026-12-04 synth left it at grow's last batch, so the first restart re-read every synthetic
    # batch for malformed records before its query started: 102 batches, 41 s, in the --twin row's first run.)
    from tidemark.formats.quarantine_files import write_marker

    write_marker(str(work / "quarantine"), versions - 1)
    proof: dict[str, Any] | str = "skipped (--no-proof)" if args.no_proof else prove_readable(spark, last, versions - 1)
    return {
        "synthetic_batches": versions - 1 - last,
        "deltas": "twin: each partition's last real delta and its .crc, a source-log entry a batch"
        if twin
        else "empty",
        "deltas_by": "metadata-row copies in MariaDB" if socket else "REST",
        "snapshot_at": snapshot_at,
        "chain": chain,
        "uploaded": uploaded,
        "upload_s": round(upload_s, 1),
        "empty_delta_bytes": len(delta),
        "proof": proof,
    }


@dataclass
class Twin:
    """What makes a synthetic chain look like one Spark grew (--twin): each partition's newest real delta (with
    Spark 4.1's `.crc` beside it, ChecksumCheckpointFileManager's) copied to every synthetic version, so a replay
    reads data and verifies a checksum per delta as it would; and an entry in the file source's log for every batch,
    its offset moving with it. Re-applying the same delta leaves the state as it was (its puts are the values the
    snapshot holds, its removes remove nothing), so Spark's reader proof still holds."""

    last: int  # grow's last real batch: its state version last + 1 is the copied one
    source_last: int  # the source log's newest batch id at `last`
    template: dict[str, Any]  # its newest entry: the landing file (it exists: a replayed getBatch may stat it)
    entries: list[str]  # every entry the log holds at `last`, as its compactions carry them
    files: dict[tuple[int, str], bytes]  # (partition, suffix) -> the bytes of version last + 1's file
    suffixes: tuple[str, ...]  # ".delta", and ".delta.crc" when Spark wrote checksums

    @classmethod
    def read(cls, checkpoint: Any, last: int) -> Twin:
        names = {rel for rel, _ in blobs(f"{JOB}/checkpoint/sources/0") if re.fullmatch(r"\d+(\.compact)?", rel)}
        ids = sorted({int(name.split(".")[0]) for name in names})
        entries: list[str] = []
        for batch in ids:
            name = f"{batch}.compact" if f"{batch}.compact" in names else str(batch)
            body = [ln for ln in (checkpoint.read_bytes(f"sources/0/{name}") or b"").decode().split("\n")[1:] if ln]
            entries = body if name.endswith(".compact") else entries + body
        crc = checkpoint.read_bytes(f"state/0/0/{last + 1}.delta.crc") is not None
        suffixes = (".delta", ".delta.crc") if crc else (".delta",)
        files = {
            (p, suffix): checkpoint.read_bytes(f"state/0/{p}/{last + 1}{suffix}") or b""
            for p in range(PARTITIONS)
            for suffix in (*suffixes, ".snapshot.crc")
        }
        return cls(last, ids[-1], json.loads(entries[-1]), entries, files, suffixes)

    def log_id(self, batch: int) -> int:
        return self.source_last + batch - self.last

    def offset(self, batch: int) -> str:
        return json.dumps({"logOffset": self.log_id(batch)}, separators=(",", ":"))

    def source_entry(self, batch: int) -> tuple[str, bytes]:
        log_id = self.log_id(batch)
        entry = {
            **self.template,
            "batchId": log_id,
            "timestamp": int(self.template["timestamp"]) + 1000 * (batch - self.last),
        }
        self.entries.append(json.dumps(entry, separators=(",", ":")))
        if (log_id + 1) % 10 == 0:
            return f"job/checkpoint/sources/0/{log_id}.compact", "\n".join(["v1", *self.entries]).encode()
        return f"job/checkpoint/sources/0/{log_id}", "\n".join(["v1", self.entries[-1]]).encode()

    def deltas(self, partition: int, version: int) -> list[tuple[str, bytes]]:
        return [(f"{version}{suffix}", self.files[(partition, suffix)]) for suffix in self.suffixes]

    def snapshot_crc(self, partition: int) -> bytes | None:
        return self.files[(partition, ".snapshot.crc")] or None


def copy_blob_rows(socket: Path, *, name: str, source: str, first: int, last: int, skip: str = "") -> int:
    """For each partition p and version v (first..last), a blob named by the SQL expression `name` (over p.seq and
    v.seq) as a copy of the metadata row of the blob `source` names, in Azurite's SQL store: the same bytes (one
    extent), a blob Spark and tidemark read, list and delete as any other (docs/benchmarks: Azurite writes ~61 blobs
    a second over REST, so 200,000 would take an hour). skip: SQL that leaves some (p, v) out. The rows written."""
    from tests.mariadb import DATABASE, copyable_blob_columns, run_sql
    from tests.servers import ACCOUNT

    def sql(statement: str) -> str:
        return run_sql(socket, statement, timeout=1800)

    kept = copyable_blob_columns(sql)
    before = int(sql(f"SELECT COUNT(*) FROM {DATABASE}.Blobs").strip())
    step = 20  # partitions a statement
    for low in range(0, PARTITIONS, step):
        high = min(PARTITIONS, low + step) - 1
        sql(
            f"USE {DATABASE}; INSERT INTO Blobs ({kept}, blobName) SELECT {kept}, {name} "
            f"FROM Blobs, seq_{low}_to_{high} AS p, seq_{first}_to_{last} AS v "
            f"WHERE accountName = '{ACCOUNT}' AND containerName = '{CONTAINER}' AND blobName = {source} {skip}"
        )
    return int(sql(f"SELECT COUNT(*) FROM {DATABASE}.Blobs").strip()) - before


def _in_partition(tail: str) -> str:
    """The SQL name of a blob in partition p.seq's state folder, ending in the SQL expression `tail`."""
    return f"CONCAT('job/checkpoint/state/0/', p.seq, '/', {tail})"


def copy_deltas(socket: Path, seed: str, *, first: int, last: int) -> int:
    """Every other empty delta (each partition, versions first..last) as a copy of blob `seed`."""
    name = _in_partition("v.seq, '.delta'")
    skip = f"AND NOT (p.seq = 0 AND v.seq = {first})"  # the seed itself
    return copy_blob_rows(socket, name=name, source=f"'{seed}'", first=first, last=last, skip=skip)


def copy_partition_files(socket: Path, suffix: str, *, source: int, first: int, last: int) -> int:
    """Each partition's blob `<source><suffix>` again as `<v><suffix>` for versions first..last: --twin's deltas and
    checksum files."""
    name, own = _in_partition(f"v.seq, '{suffix}'"), _in_partition(f"'{source}{suffix}'")
    return copy_blob_rows(socket, name=name, source=own, first=first, last=last)


def prove_readable(spark: Any, last_real: int, last: int) -> dict[str, Any]:
    """Spark's own statestore reader: the newest state equals the last real one; two partitions replay every
    synthetic delta from their first snapshot."""
    location = f"{JOB}/checkpoint"
    spark.streams.active  # noqa: B018 - starts the StateStoreCoordinator the reader's stores report to
    real = spark.read.format("statestore").option("batchId", last_real).load(location)
    newest = spark.read.format("statestore").option("batchId", last).load(location)
    # Each read once (a read of the newest state replays every partition's chain: minutes at the full size).
    real_rows = real.collect()
    newest_rows = newest.collect()
    rows = len(real_rows)
    differ = sum((Counter(map(repr, real_rows)) - Counter(map(repr, newest_rows))).values())
    differ += sum((Counter(map(repr, newest_rows)) - Counter(map(repr, real_rows))).values())
    replayed = []
    for partition in (0, PARTITIONS - 1):
        frame = (
            spark.read.format("statestore")
            .option("batchId", last)
            .option("snapshotStartBatchId", last_real)
            .option("snapshotPartitionId", partition)
            .load(location)
        )
        replayed.append(frame.count())
    expected = [sum(row["partition_id"] == p for row in real_rows) for p in (0, PARTITIONS - 1)]
    if differ or replayed != expected:
        raise RuntimeError(f"Spark's reader disagrees: {differ} rows differ, replayed {replayed} != {expected}")
    return {"rows": rows, "rows_differing": differ, "replayed_partitions": replayed}


def copy_prefix(socket: Path, source: str, target: str) -> int:
    """Every blob under `source` again under `target`, as copies of its metadata row in Azurite's SQL store (the
    same bytes, one extent each): a fork of the whole job in seconds."""
    from tests.mariadb import DATABASE, copyable_blob_columns, run_sql
    from tests.servers import ACCOUNT

    def sql(statement: str) -> str:
        return run_sql(socket, statement, timeout=1800)

    kept = copyable_blob_columns(sql)
    where = f"accountName = '{ACCOUNT}' AND containerName = '{CONTAINER}'"
    sql(
        f"USE {DATABASE}; INSERT INTO Blobs ({kept}, blobName) "
        f"SELECT {kept}, CONCAT('{target}', SUBSTRING(blobName, {len(source) + 1})) FROM Blobs "
        f"WHERE {where} AND blobName LIKE '{source}%'"
    )
    return int(sql(f"SELECT COUNT(*) FROM {DATABASE}.Blobs WHERE {where} AND blobName LIKE '{target}%'").strip())


def fork_root(phase: str) -> str:
    return f"wasbs://{CONTAINER}@{FQDN}/{FORKS[phase]}"


def phase_fork(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    """The grown job (checkpoint and sink) copied for each fork before anything restarts it."""
    socket = os.environ.get("SEED_MARIADB_SOCKET")
    if not socket:
        raise SystemExit("the fork phase copies metadata rows: it needs --store sql")
    started = time.monotonic()
    copied = {name: copy_prefix(Path(socket), "job/", f"{folder}/") for name, folder in FORKS.items()}
    return {"copied_blobs": copied, "seconds": round(time.monotonic() - started, 1)}


def phase_before(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    names = blobs(f"{JOB}/checkpoint")
    release_next(work)
    result = measured_run(work, config(work, "before"), proxy)
    return {
        "checkpoint_blobs": len(names),
        "partitions": PARTITIONS,
        **result,
        "oracle": check_sink(work, JOB, "before"),
    }


def phase_prune_only(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    """(b) tidemark's retention and prune alone: the same HDFS store and partitions, then the same restart (the
    same new file as `before`)."""
    from tidemark.doctor.prune import prune_checkpoint

    root = fork_root("prune_only")
    before = len(blobs(f"{root}/checkpoint"))
    proxy.reset_counts()
    started = time.monotonic()
    pruned = prune_checkpoint(f"{root}/checkpoint", keep=10, apply=True, sink=f"{root}/output")
    prune = {"seconds": round(time.monotonic() - started, 1), "files": pruned.files, "requests": dict(proxy.counts)}
    blobs_now = len(blobs(f"{root}/checkpoint"))
    result = measured_run(work, config(work, "prune_only", root=root), proxy)
    return {
        "blobs_before": before,
        "prune": prune,
        "checkpoint_blobs": blobs_now,
        "partitions": PARTITIONS,
        **result,
        "oracle": check_sink(work, root, "prune_only"),
    }


def phase_store_only(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    """(c) the store change alone: tidemark rewrites the state into RocksDB at the same partitions (no prune), then
    the same restart on RocksDB with changelog checkpointing."""
    root = fork_root("store_only")
    before = len(blobs(f"{root}/checkpoint"))
    proxy.reset_counts()
    started = time.monotonic()
    # The CLI in its own process: the rewrite's Spark session (its own settings, no Azure jars of the pipeline's)
    # would otherwise be the session the measured run gets.
    command = [sys.executable, "-m", "tidemark.cli.main", "state", "repartition", f"{root}/checkpoint"]
    command += ["--partitions", str(PARTITIONS), "--state-store", "rocksdb", "--apply"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    rewrite = {"seconds": round(time.monotonic() - started, 1), "requests": dict(proxy.counts)}
    blobs_now = len(blobs(f"{root}/checkpoint"))
    result = measured_run(work, config(work, "store_only", root=root, rocksdb=True), proxy)
    return {
        "blobs_before": before,
        "rewrite": rewrite,
        "checkpoint_blobs": blobs_now,
        "partitions": PARTITIONS,
        **result,
        "oracle": check_sink(work, root, "store_only"),
    }


def per_folder_walk(connection: str, prefix: str) -> tuple[int, int]:
    """Hadoop-style listing: one delimiter listing per folder, recursing; (files, folders listed)."""
    from azure.storage.blob import BlobServiceClient

    container = BlobServiceClient.from_connection_string(connection).get_container_client(CONTAINER)
    files = folders = 0
    pending = [prefix]
    while pending:
        folder = pending.pop()
        folders += 1
        for item in container.walk_blobs(name_starts_with=folder, delimiter="/", results_per_page=5000):
            if hasattr(item, "size"):
                files += 1
            else:
                pending.append(item.name)
    return files, folders


def phase_inspect(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    from tidemark.doctor.inspect import inspect_checkpoint

    _, connection = proxy_connection(proxy)
    rounds = []
    for _ in range(args.rounds):
        proxy.reset_counts()
        started = time.monotonic()
        report = inspect_checkpoint(f"{JOB}/checkpoint", sink=f"{JOB}/output")
        inspect_s = time.monotonic() - started
        inspect_lists = proxy.counts["list"]
        proxy.reset_counts()
        started = time.monotonic()
        files, folders = per_folder_walk(connection, "job/checkpoint/")
        walk_s = time.monotonic() - started
        rounds.append(
            {
                "inspect_s": round(inspect_s, 1),
                "inspect_list_requests": inspect_lists,
                "walk_s": round(walk_s, 1),
                "walk_list_requests": proxy.counts["list"],
                "walk_files": files,
                "walk_folders": folders,
                "inspect_files": report.files_total,
            }
        )
    return {
        "rounds": rounds,
        "findings": [
            {"code": f.code, "severity": str(f.severity), "message": f.message, "fix": f.fix} for f in report.findings
        ],
    }


def proxy_connection(proxy: FaultProxy) -> tuple[str, str]:
    endpoint = f"http://127.0.0.1:{PORT}/{ACCOUNT}"
    return endpoint, (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={azurite_account_key()};BlobEndpoint={endpoint};"
    )


def phase_cure(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    from tidemark.doctor.prune import prune_checkpoint
    from tidemark.evolve.repartition import repartition_checkpoint

    before = len(blobs(f"{JOB}/checkpoint"))
    proxy.reset_counts()
    started = time.monotonic()
    # The sink's log too (issue 39, run 5): entries before the compaction the kept batches read, which Spark would
    # otherwise delete inside the first batch after the restart, one WASB delete (~7 requests) each.
    pruned = prune_checkpoint(f"{JOB}/checkpoint", keep=10, apply=True, sink=f"{JOB}/output")
    prune = {
        "seconds": round(time.monotonic() - started, 1),
        "files": pruned.files,
        "sink_log_files": len(pruned.sink_paths),
        "requests": dict(proxy.counts),
        "blobs_after": len(blobs(f"{JOB}/checkpoint")),
    }
    # tidemark repartitions the checkpoint where it lives (issue 39): state read from a local copy, the new
    # checkpoint written and verified locally, uploaded beside it, swapped in by a journaled pair of folder moves.
    proxy.reset_counts()
    started = time.monotonic()
    report = repartition_checkpoint(f"{JOB}/checkpoint", 4, apply=True, state_store="rocksdb")
    repartition_s = time.monotonic() - started
    return {
        "blobs_before": before,
        "prune": prune,
        "repartition_route": "in place (download, rewrite and verify locally, upload, journaled swap)",
        "repartition_s": round(repartition_s, 1),
        "repartition_requests": dict(proxy.counts),
        "repartition": {"batch": report.batch, "from": report.old_partitions, "to": report.new_partitions},
        "archive": report.archive,
        "cured_blobs": len(blobs(f"{JOB}/checkpoint")),
    }


def phase_after(work: Path, proxy: FaultProxy, args: argparse.Namespace) -> dict[str, Any]:
    release_next(work)
    result = measured_run(work, config(work, "after", cured=True), proxy)
    return {
        "checkpoint_blobs": len(blobs(f"{JOB}/checkpoint")),
        "partitions": 4,
        **result,
        "oracle": check_sink(work, JOB, "after"),
    }


def run_phase(name: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One phase in this process, with the servers up and the environment pointing through the proxy."""
    global PARTITIONS, SLOTS
    PARTITIONS = args.partitions
    SLOTS = args.slots
    measured = ("before", "prune_only", "store_only", "inspect", "cure", "after")
    latency = args.latency_ms / 1000 if name in measured else 0.0
    with servers(work, latency) as (proxy, connection):
        os.environ["AZURE_STORAGE_CONNECTION_STRING"] = connection
        for other in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT_NAME"):
            os.environ.pop(other, None)
        load = os.getloadavg()
        started = time.monotonic()
        result = globals()[f"phase_{name}"](work, proxy, args)
        result["phase_s"] = round(time.monotonic() - started, 1)
        result["load_before"] = [round(x, 1) for x in load]
        result["load_after"] = [round(x, 1) for x in os.getloadavg()]
        result["latency_ms"] = latency * 1000
        return result


def decomposition(summary: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each restart of the one grown checkpoint against `before` (the seed's setup): first batch's wall time and
    requests until its commit; for `before`, the requests per delta it replayed (the real-vs-synthetic row)."""
    before = summary["before"]
    chain = int(summary.get("chain", {}).get("chain") or args.chain)
    requests = sum((before.get("requests_until_first_commit") or {}).values())
    rows: dict[str, Any] = {
        "before_requests_per_replayed_delta": round(requests / (chain * int(before["partitions"])), 2),
        "chain": chain,
        "chain_by": "Spark (real batches)"
        if args.real_chain
        else ("synth --twin (copied real deltas)" if args.twin else "synth (empty deltas)"),
    }
    for name, label in (
        ("before", "(a) as the seed ran it"),
        ("prune_only", "(b) retention and prune only"),
        ("store_only", "(c) store change only"),
        ("after", "(d) the full cure"),
    ):
        if name not in summary:
            continue
        phase = summary[name]
        rows[name] = {
            "what": label,
            "checkpoint_blobs": phase["checkpoint_blobs"],
            "partitions": phase["partitions"],
            "first_batch_wall_s": phase["first_batch_wall_s"],
            "requests_until_first_commit": sum((phase.get("requests_until_first_commit") or {}).values()),
            "speedup": round(before["first_batch_wall_s"] / phase["first_batch_wall_s"], 1),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="shuffle partitions (the seed: 200)")
    parser.add_argument("--slots", type=int, default=SLOTS, help="Spark task slots, local[N] (every phase)")
    parser.add_argument("--phase", choices=[*PHASES, "all"], default="all")
    parser.add_argument("--persist", action="store_true", help="Azurite keeps its data on disk (resumable, slow)")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="the phases of an all-phases run, in their order (e.g. grow,synth,cure,after: the cure alone)",
    )
    parser.add_argument("--no-proof", action="store_true", help="synth skips Spark's reader proof (~17 min at 200 k)")
    parser.add_argument(
        "--real-chain",
        type=int,
        default=0,
        help="N: the chain is N real batches Spark runs after grow (no synthetic delta; synth skips)",
    )
    parser.add_argument(
        "--twin",
        action="store_true",
        help="synth copies each partition's last real delta and its .crc to every synthetic version and writes a "
        "source-log entry a batch (a chain shaped like --real-chain's; default: empty deltas, as the 200 k runs)",
    )
    parser.add_argument(
        "--store",
        choices=("sql", "memory"),
        default="sql",
        help="Azurite's metadata store: MariaDB (flat as the container grows; default) or LokiJS in memory",
    )
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.phase != "all":
        result = run_phase(args.phase, work, args)
        (work / f"{args.phase}.json").write_text(json.dumps(result, indent=2, default=str))
        print(json.dumps({args.phase: result}, indent=2, default=str))
        return
    azurite: subprocess.Popen[bytes] | None = None
    sql: Any = None
    if not args.persist:  # the server's data lives as long as this process, so every phase reruns
        for name in PHASES:
            (work / f"{name}.json").unlink(missing_ok=True)
        scratch = ("landing", "staged", "configs", "monitor", "quarantine", "cure", "server")
        for folder in (*scratch, *(f"{name}-sink" for name in ("before", "after", *FORKS))):
            shutil.rmtree(work / folder, ignore_errors=True)
        if args.store == "sql":
            from tests.mariadb import start_sql_azurite

            (work / "server").mkdir()
            sql = start_sql_azurite(work / "server")
            port = sql.azurite.port
            os.environ["SEED_MARIADB_SOCKET"] = str(sql.mariadb.socket)
        else:
            azurite, port = start_azurite(work, persist=False)
        os.environ["SEED_AZURITE_PORT"] = str(port)
    chosen = [name for name in PHASES if name in args.phases.split(",")]
    try:
        for name in chosen:
            if (work / f"{name}.json").exists():
                continue
            command = [sys.executable, __file__, "--work", str(work), "--phase", name]
            command += ["--versions", str(args.versions), "--chain", str(args.chain)]
            command += ["--latency-ms", str(args.latency_ms), "--rounds", str(args.rounds)]
            command += ["--partitions", str(args.partitions), "--slots", str(args.slots), "--store", args.store]
            command += ["--no-proof"] if args.no_proof else []
            command += ["--real-chain", str(args.real_chain)]
            command += ["--twin"] if args.twin else []
            print(f"phase {name} ... ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
            subprocess.run(command, check=True)
    finally:
        if azurite is not None:
            _stop(azurite)
        if sql is not None:
            sql.stop()
    summary: dict[str, Any] = {name: json.loads((work / f"{name}.json").read_text()) for name in chosen}
    if "before" in summary and "after" in summary:  # a run of some phases compares across runs by hand
        before, after = summary["before"], summary["after"]
        summary["ratios"] = {
            "restart_speedup": round(before["first_batch_wall_s"] / after["first_batch_wall_s"], 1),
            "blob_reduction": round(before["checkpoint_blobs"] / after["checkpoint_blobs"], 1),
        }
    if "before" in summary:
        summary["decomposition"] = decomposition(summary, args)
    (work / "result.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
