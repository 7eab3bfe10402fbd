"""Fresh processes: `tidemark run CONFIG` against the same query hand-written in PySpark (`python job.py`).

Run by hand (issue 59). Each command is a new process, as a scheduler starts it: its interpreter, imports, JVM,
session, query and stop are all in the figure.

    .venv/bin/python benchmarks/fresh_process.py prepare DIR [--events 500000 --files 20 --keys 2000]
        [--files-per-trigger 4 | --files-per-trigger 0]   # 0: no per-trigger limit (the catch-up figure)
        [--source files|kafka] [--sink parquet|delta]      # the three pairs of issue 59
    .venv/bin/python benchmarks/fresh_process.py compare DIR [--rounds 5]
    .venv/bin/python benchmarks/fresh_process.py phases DIR

`prepare` writes DIR/landing (the events), DIR/tidemark.toml, DIR/job.py (the hand-written streaming job: local[2],
the same shuffle partitions, RocksDB with changelog, trigger, watermark, window and output columns) and
DIR/batch_job.py (the same windows in one batch job). `compare` runs `tidemark run` and `python job.py` (or, with
--baseline batch, the batch job) interleaved A B, B A, ... for N rounds, each in a fresh output folder, times each with
time.monotonic (wall) and resource.getrusage(RUSAGE_CHILDREN) (user + system CPU of the Python process: PySpark's JVM
is a child it never waits for, so its CPU is in neither figure), checks that both wrote the same rows (against the
batch job: counts the stream's rows the batch has), and prints min/median/max of each and of the ratios pair by pair.
With --source kafka, `compare` and `phases` start a real broker (tests/kafka_broker.py, `make kafka`) and produce
the events to a 4-partition topic once; a trigger reads as many records as --files-per-trigger files hold. With
--sink delta both write a Delta table (Delta's jars from tidemark's lock on the job's spark.jars, its extension and
catalog), read back with delta-rs.
`phases` runs both N times, interleaved: `tidemark run` in a fresh process whose boot script wraps each phase's
function with a clock (PHASES), the job with marks of its own; the query's own time (first batch's start to last
batch's end) comes from Spark's progress.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"
TOPIC = "fresh"

JOB = '''"""The hand-written streaming job: what a careful user writes, with tidemark's settings."""
import json, os, sys, time
marks = {{"start": time.time()}}
from pyspark.sql import SparkSession, functions as F
marks["imported"] = time.time()
out = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]").appName("job"){session}
    .config("spark.sql.shuffle.partitions", "{partitions}")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    .config("spark.sql.streaming.minBatchesToRetain", "20")
    .getOrCreate()
)
marks["session"] = time.time()
{reader}
events = (
    events
    .withColumn("ts", F.to_timestamp("ts"))
    .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
    .withWatermark("ts", "10 minutes")
)
windows = events.groupBy("user", F.window("ts", "15 minutes")).agg(
    F.min("ts").alias("firstEventTime"), F.max("ts").alias("lastEventTime"),
    F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"),
)
query = (
    windows.select("user", F.col("window.start").alias("windowStart"), F.col("window.end").alias("windowEnd"),
                   "firstEventTime", "lastEventTime", "count", "value_sum")
    .writeStream.format("{sink}").option("path", out + "/output")
    .option("checkpointLocation", out + "/checkpoint").partitionBy("windowStart")
    .outputMode("append").trigger(availableNow=True).start()
)
marks["started"] = time.time()
query.awaitTermination()
marks["query"] = time.time()
progress = [p for p in query.recentProgress if p["numInputRows"] or p["durationMs"].get("addBatch")]
spark.stop()
marks["stopped"] = time.time()
if os.environ.get("BENCH_MARKS"):
    with open(os.environ["BENCH_MARKS"], "w") as handle:
        json.dump({{"marks": marks, "batches": [[p["timestamp"], p["batchDuration"]] for p in progress]}}, handle)
'''

BATCH_JOB = '''"""The same windows in one batch job over the same files."""
import json, os, sys, time
from pyspark.sql import SparkSession, functions as F
out = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").appName("batch")
         .config("spark.sql.shuffle.partitions", "{partitions}").config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false").getOrCreate())
events = (spark.read.schema("{schema}").json("{landing}").withColumn("ts", F.to_timestamp("ts"))
          .where(F.col("ts").isNotNull() & F.col("user").isNotNull()))
windows = events.groupBy("user", F.window("ts", "15 minutes")).agg(
    F.min("ts").alias("firstEventTime"), F.max("ts").alias("lastEventTime"),
    F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"))
started = time.time()
(windows.select("user", F.col("window.start").alias("windowStart"), F.col("window.end").alias("windowEnd"),
                "firstEventTime", "lastEventTime", "count", "value_sum")
 .write.partitionBy("windowStart").parquet(out + "/output"))
written = time.time()
spark.stop()
if os.environ.get("BENCH_MARKS"):
    with open(os.environ["BENCH_MARKS"], "w") as handle:
        json.dump({{"write_s": written - started}}, handle)
'''


def _session_lines(jars: list[str], delta: bool) -> str:
    """The hand-written job's extra session settings: the jars tidemark's lock resolves, Delta's extension."""
    lines = [f'\n    .config("spark.jars", "{",".join(jars)}")'] if jars else []
    if delta:
        lines.append('\n    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")')
        lines.append(
            '\n    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")'
        )
    return "".join(lines)


def _reader_lines(source: str, landing: Path, limit: int | None, per_trigger: int) -> str:
    """The hand-written job's source: the JSON files, or the topic's JSON values (tidemark's parse of them)."""
    if source == "files":
        option = f'.option("maxFilesPerTrigger", {limit})' if limit else ""
        return f'events = spark.readStream.schema("{SCHEMA}"){option}.json("{landing}")'
    option = f'.option("maxOffsetsPerTrigger", {per_trigger})' if limit else ""
    return (
        'events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "@BOOTSTRAP@")\n'
        f'          .option("subscribe", "{TOPIC}").option("startingOffsets", "earliest"){option}.load()\n'
        f'          .select(F.from_json(F.col("value").cast("string"), "{SCHEMA}").alias("r")).select("r.*"))'
    )


def prepare(args: argparse.Namespace) -> None:
    """Generate the events and write the config and the two hand-written jobs (the source, the sink: --source,
    --sink; a Kafka variant's records are produced by `compare`, to a broker it starts)."""
    from tests.helpers import kafka_source, write_config

    from tidemark.pipeline.generate import generate_events
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import fetch

    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    landing = work / "landing"
    shutil.rmtree(landing, ignore_errors=True)
    limit = args.files_per_trigger or None
    per_trigger = args.events // args.files * (limit or args.files)  # a Kafka trigger reads as many events
    if args.source == "files":
        generate_events(
            landing, args.events, args.keys, args.files, seed=1, late_fraction=0.001, span=timedelta(hours=6)
        )
        source = {"path": str(landing), "max_files_per_trigger": limit}
    else:
        source = kafka_source("@BOOTSTRAP@", TOPIC, max_offsets_per_trigger=per_trigger if limit else None)
    features = ([JarFeature.KAFKA] if args.source == "kafka" else []) + (
        [JarFeature.DELTA] if args.sink == "delta" else []
    )
    jars = [str(p) for p in fetch(features).paths] if features else []
    # Paths are filled in per run (compare and phases copy the config into the run's folder).
    write_config(
        work,
        pipeline={"name": "fresh"},
        spark={"shuffle_partitions": args.partitions},
        source=source,
        sink={"format": args.sink, "path": "@OUT@/output"},
        checkpoint={"location": "@OUT@/checkpoint"},
        quarantine={"path": "@OUT@/quarantine"},
        aggregation={
            "extra": [
                {"function": "sum", "column": "value", "name": "value_sum"},
            ]
        },
    )
    fields = {
        "partitions": args.partitions,
        "schema": SCHEMA,
        "landing": str(landing),
        "session": _session_lines(jars, args.sink == "delta"),
        "reader": _reader_lines(args.source, landing, limit, per_trigger),
        "sink": args.sink,
    }
    (work / "job.py").write_text(JOB.format(**fields), encoding="utf-8")
    if args.source == "files":
        (work / "batch_job.py").write_text(BATCH_JOB.format(**fields), encoding="utf-8")
    variant = {"source": args.source, "sink": args.sink, "events": args.events, "keys": args.keys}
    (work / "variant.json").write_text(json.dumps(variant), encoding="utf-8")
    print(f"prepared {work}: {variant}, {args.files} files, per trigger: {limit}")


@contextmanager
def _broker(work: Path) -> Iterator[str | None]:
    """A Kafka variant's broker (tests/kafka_broker.py), its topic loaded once with the events; None for files."""
    variant = json.loads((work / "variant.json").read_text(encoding="utf-8"))
    if variant["source"] != "kafka":
        yield None
        return
    from tests.kafka_broker import start_broker
    from tests.kafka_data import make_events, produce

    folder = work / "broker"
    shutil.rmtree(folder, ignore_errors=True)
    broker = start_broker(folder)
    try:
        broker.create_topic(TOPIC, partitions=4)
        chunk = 100_000
        for first in range(0, variant["events"], chunk):
            count = min(chunk, variant["events"] - first)
            events = make_events(count, keys=variant["keys"], seed=first, span=timedelta(hours=6), first_id=first)
            produce(broker, TOPIC, events[:count])
        yield broker.bootstrap
    finally:
        broker.stop()


def _tidemark() -> str:
    return str(Path(sys.executable).with_name("tidemark"))


def _command(work: Path, which: str, out: Path, bootstrap: str | None = None) -> list[str]:
    """The command of one run writing into out (a fresh folder); a Kafka variant's broker at bootstrap."""
    out.mkdir(parents=True)

    def filled(name: str) -> Path:
        text = (work / name).read_text(encoding="utf-8").replace("@OUT@", str(out))
        (out / name).write_text(text.replace("@BOOTSTRAP@", bootstrap or ""), encoding="utf-8")
        return out / name

    if which == "tidemark":
        return [_tidemark(), "run", str(filled("tidemark.toml"))]
    return [sys.executable, str(filled("job.py" if which == "job" else "batch_job.py")), str(out)]


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the process and every child it waited for) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        msg = f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _row(row: dict[str, object], window: str) -> tuple[object, ...]:
    """One output row, its window start from its partition folder's name."""
    value = row["value_sum"]
    assert isinstance(value, float)
    return (row["user"], window.replace("%3A", ":"), str(row["windowEnd"]), row["count"], round(value, 6))


def _rows(output: Path) -> list[tuple[object, ...]]:
    """The sink's rows, sorted, as a plain Parquet reader sees them (Spark's log decides which files count)."""
    import pyarrow.parquet as pq

    log = output / "_spark_metadata"
    files: list[str] = []
    entries = [p for p in log.iterdir() if p.name.split(".")[0].isdigit()]  # batch files, not their .crc
    for entry in sorted(entries, key=lambda p: int(p.name.split(".")[0])):
        for line in entry.read_text(encoding="utf-8").splitlines()[1:]:
            record = json.loads(line)
            if record["action"] == "add":
                files.append(record["path"])
    rows = []
    for path in files:
        local = unquote(path.removeprefix("file:"))  # the log holds URIs: file:/path%20with%253Aescapes
        window = Path(local).parent.name.split("=", 1)[1]
        for row in pq.read_table(local).to_pylist():
            rows.append(_row(row, window))
    return sorted(rows)


def _delta_rows(output: Path) -> list[tuple[object, ...]]:
    """A Delta table's rows, sorted, as delta-rs reads them (its log decides which files count)."""
    from deltalake import DeltaTable

    rows = []
    for row in DeltaTable(str(output)).to_pyarrow_table().to_pylist():
        rows.append(_row(row, str(row["windowStart"])))
    return sorted(rows)


def _batch_rows(output: Path) -> list[tuple[object, ...]]:
    import pyarrow.parquet as pq

    rows = []
    for local in output.rglob("*.parquet"):
        window = local.parent.name.split("=", 1)[1]
        for row in pq.read_table(local).to_pylist():
            rows.append(_row(row, window))
    return sorted(rows)


def spread(values: list[float]) -> str:
    """min / median / max"""
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def compare(args: argparse.Namespace) -> None:
    """A B A B ...: tidemark run vs the hand-written job (or the batch job), fresh processes, pair by pair."""
    work = Path(args.dir).resolve()
    baseline = "job" if args.baseline == "stream" else "batch"
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    delta = json.loads((work / "variant.json").read_text(encoding="utf-8"))["sink"] == "delta"
    figures: dict[str, list[tuple[float, float]]] = {"tidemark": [], baseline: []}
    spark_numbers: dict[str, list[Any]] = {"tidemark": [], "batch": []}
    with _broker(work) as bootstrap:
        for round_number in range(args.rounds + 1):  # round 0 warms the disk cache and the JVM's class data
            # A B, B A, A B, ...: neither command always runs first (right after the other's JVM exits).
            for which in ("tidemark", baseline) if round_number % 2 == 0 else (baseline, "tidemark"):
                out = runs / f"r{round_number}-{which}"
                env = {**os.environ, "BENCH_MARKS": str(runs / f"r{round_number}-{which}.marks.json")}
                wall, cpu = _timed(_command(work, which, out, bootstrap), env)
                if round_number and which == "tidemark":
                    spark_numbers["tidemark"].append(_stream_batches(out / "checkpoint-monitor"))
                elif round_number and which == "batch":
                    spark_numbers["batch"].append(_batch_write(runs / f"r{round_number}-batch.marks.json"))
                if round_number == 0:
                    print(f"warm-up {which}: {wall:.1f}s wall, {cpu:.1f}s cpu", flush=True)
                    continue
                figures[which].append((wall, cpu))
                print(f"round {round_number} {which}: {wall:.1f}s wall, {cpu:.1f}s cpu", flush=True)
            if round_number == 1 or args.proof:
                _prove(runs, round_number, baseline, delta)
            if round_number:
                for which in ("tidemark", baseline):
                    shutil.rmtree(runs / f"r{round_number}-{which}", ignore_errors=True)
    print(f"\n{'':<10} {'wall s min / median / max':>28} {'cpu s min / median / max':>28}")
    for which, values in figures.items():
        print(f"{which:<10} {spread([w for w, _ in values]):>28} {spread([c for _, c in values]):>28}")
    # Speed ratio: baseline time / tidemark time (above 1: tidemark faster), pair by pair.
    walls = [b[0] / t[0] for t, b in zip(figures["tidemark"], figures[baseline], strict=True)]
    cpus = [b[1] / t[1] for t, b in zip(figures["tidemark"], figures[baseline], strict=True)]
    print(f"\n{baseline} / tidemark (speed ratio), {args.rounds} pairs: wall {spread(walls)}, cpu {spread(cpus)}")
    if baseline == "batch":
        _print_spark_numbers(spark_numbers["tidemark"], spark_numbers["batch"])


# Spark's own per-batch figures of a streaming run (its progress events), seconds: where a stream's time goes.
DURATIONS = ("triggerExecution", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "latestOffset", "getBatch")
STATE = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")


def _stream_batches(monitor_dir: Path) -> list[dict[str, float]]:
    """Each batch of a run, from Spark's progress: input rows, durationMs parts and the state operators' times (s)."""
    found: dict[int, dict[str, float]] = {}
    for file in monitor_dir.rglob("*.jsonl"):
        for line in file.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            progress = record.get("progress") if record.get("type") == "progress" else None
            if not progress:
                continue
            row: dict[str, float] = {"rows": float(progress.get("numInputRows", 0))}
            durations = progress.get("durationMs") or {}
            row.update({name: durations.get(name, 0) / 1000 for name in DURATIONS})
            for name in STATE:
                row[name] = sum(op.get(name, 0) for op in progress.get("stateOperators") or []) / 1000
            found[int(progress["batchId"])] = row
    return [found[b] for b in sorted(found)]


def _batch_write(marks: Path) -> float:
    """The batch job's one action (read, aggregate, write), seconds, as the job clocked it."""
    return float(json.loads(marks.read_text(encoding="utf-8"))["write_s"])


def _print_spark_numbers(streams: list[list[dict[str, float]]], writes: list[float]) -> None:
    """Medians over the rounds: each stream batch's Spark-reported parts beside the batch job's action."""
    print(f"\nthe batch job's action (read, aggregate, write), s: {spread(writes)}")
    batches = min(len(rounds) for rounds in streams) if streams else 0
    print(f"tidemark's query, Spark's own progress figures per batch, s, median [min-max] of {len(streams)} rounds:")
    for index in range(batches):
        print(f"  batch {index}: {statistics.median(r[index]['rows'] for r in streams):,.0f} input rows")
        for name in (*DURATIONS, *STATE):
            values = [r[index][name] for r in streams]
            if max(values) > 0:
                print(f"    {name:<20} {statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]")
    totals = [sum(b["triggerExecution"] for b in r) for r in streams]
    print(f"  all batches' triggerExecution: {spread(totals)}")


def _prove(runs: Path, round_number: int, baseline: str, delta: bool) -> None:
    """Both runs of a round wrote the same rows (against the batch job: how many of the stream's rows it has)."""
    read = _delta_rows if delta else _rows
    mine = read(runs / f"r{round_number}-tidemark" / "output")
    theirs = (read if baseline == "job" else _batch_rows)(runs / f"r{round_number}-{baseline}" / "output")
    if baseline == "batch":
        # The stream drops events behind its watermark and leaves the windows still open at the end unwritten:
        # its rows are the batch's closed windows, and most match the batch's row exactly.
        same = len(set(mine) & set(theirs))
        print(f"round {round_number}: stream {len(mine):,} rows, batch {len(theirs):,}, {same:,} identical")
    elif mine != theirs or not mine:
        msg = f"round {round_number}: outputs differ ({len(mine)} vs {len(theirs)} rows)"
        raise RuntimeError(msg)
    else:
        print(f"round {round_number}: outputs equal ({len(mine):,} rows)", flush=True)


# The phases of `tidemark run`: (phase, module, attribute) wrapped with a clock in a fresh process before the CLI
# runs (each is looked up through its module at call time, so the wrapper is what the run calls).
PHASES: list[tuple[str, str, str]] = [
    ("config load and checks", "tidemark.config", "load_config"),
    ("jar resolution (session settings)", "tidemark.needs", "session_conf"),
    ("checkpoint swaps (a killed repartition)", "tidemark.formats", "finish_checkpoint_swaps"),
    ("start plan (state store, RocksDB cap)", "tidemark.sizing.store_start", "plan_start"),
    ("restart check (before)", "tidemark.evolve.guard", "RestartCheck.before"),
    ("failover (before)", "tidemark.recovery.failover", "Failover.before"),
    ("session start and settings", "tidemark.pipeline.start", "Launch.session"),
    (
        "(within the Kafka rows) admin client open in the driver's JVM",
        "tidemark.sources.kafka.admin",
        "KafkaAdmin.__enter__",
    ),
    ("(within the Kafka rows) admin client close", "tidemark.sources.kafka.admin", "KafkaAdmin.__exit__"),
    ("Kafka: start check (broker, topics, lost offsets)", "tidemark.sources.kafka.start", "check_kafka_start"),
    ("Kafka: backlog (catch-up plan)", "tidemark.sources.kafka.start", "kafka_backlog"),
    ("Kafka: live offsets (monitor)", "tidemark.sources.kafka.source", "KafkaSource.live_offsets"),
    ("quarantine reconcile", "tidemark.pipeline.reconcile", "reconcile_quarantine"),
    ("monitor (listener, progress log) start", "tidemark.monitor.listener", "RunMonitor.start"),
    ("owed-batch plan", "tidemark.pipeline.run", "_plan_owed_batch"),
    ("query start (plan, start())", "tidemark.pipeline.run", "start_query"),
    ("quarantine writes", "tidemark.pipeline.run", "_write_quarantine"),
    ("wait for the listener", "tidemark.pipeline.run", "_wait_for_listener"),
    ("monitor stop", "tidemark.monitor.listener", "RunMonitor.stop"),
    ("restart check (after)", "tidemark.evolve.guard", "RestartCheck.after"),
    ("failover (after)", "tidemark.recovery.failover", "Failover.after"),
    ("run_pipeline (all of the above but the config and the stop)", "tidemark.pipeline.run", "run_pipeline"),
]

BOOT = """
import atexit, functools, importlib, json, sys, time
t0 = time.time()
import tidemark.cli.main as main
import tidemark.pipeline.run, tidemark.evolve.guard, tidemark.recovery.failover, tidemark.pipeline.start
t1 = time.time()
import pyspark.sql
t2 = time.time()
spent, ends = {}, {}
def clock(name, function):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        started = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.monotonic() - started
            ends[name] = time.time()
    return timed
for name, module, attribute in PHASES:
    owner = importlib.import_module(module)
    *path, last = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, last, clock(name, getattr(owner, last)))
def dump():
    json.dump({"start": t0, "imported": t1, "pyspark": t2, "returned": returned[0], "exit": time.time(),
               "spent": spent, "ends": ends}, open(MARKS, "w"))
returned = [None]
atexit.register(dump)
sys.argv = ["tidemark", *sys.argv[1:]]
try:
    main._entry()
finally:
    returned[0] = time.time()
"""


def _tidemark_phases(
    work: Path, runs: Path, index: int, bootstrap: str | None
) -> tuple[float, list[tuple[str, float]]]:
    """One fresh `tidemark run` with its phases clocked: wall seconds and (phase, seconds) rows."""
    out = runs / f"tidemark-{index}"
    command = _command(work, "tidemark", out, bootstrap)
    marks = runs / f"marks-{index}.json"
    script = runs / "boot.py"
    script.write_text(f"PHASES = {PHASES!r}\nMARKS = {str(marks)!r}\n" + BOOT, encoding="utf-8")
    spawned = time.time()
    wall, _ = _timed([sys.executable, str(script), *command[1:]])
    m = json.loads(marks.read_text(encoding="utf-8"))
    spent = m["spent"]
    query, first_start, last_end = _query_span(out / "checkpoint-monitor")
    rows = [
        ("interpreter start", m["start"] - spawned),
        ("tidemark imports (CLI and run)", m["imported"] - m["start"]),
        ("pyspark import", m["pyspark"] - m["imported"]),
    ]
    rows += [(name, spent.get(name, 0.0)) for name, _, _ in PHASES]
    rows.append(("query start to first batch start", first_start - m["ends"]["query start (plan, start())"]))
    rows.append(("the query: first batch start to last batch end", query))
    rows.append(("last batch end to run_pipeline's return (stop included)", m["returned"] - last_end))
    rows.append(("CLI output and interpreter exit (JVM's end)", spawned + wall - m["returned"]))
    # What no row holds: the listener's registration (PySpark's callback server), the run lock, the monitor's set-up.
    counted = sum(seconds for name, seconds in rows if not name.startswith(("run_pipeline", "(within")))
    rows.append(("between the clocked phases (listener registration, run lock)", wall - counted))
    return wall, rows


def _job_phases(work: Path, runs: Path, index: int, bootstrap: str | None) -> tuple[float, list[tuple[str, float]]]:
    """One fresh hand-written job with its own marks."""
    from datetime import datetime

    marks = runs / f"job-marks-{index}.json"
    env = {**os.environ, "BENCH_MARKS": str(marks)}
    spawned = time.time()
    wall, _ = _timed(_command(work, "job", runs / f"job-{index}", bootstrap), env)
    job = json.loads(marks.read_text(encoding="utf-8"))
    m, batches = job["marks"], job["batches"]
    first = datetime.fromisoformat(batches[0][0].replace("Z", "+00:00")).timestamp()
    last = datetime.fromisoformat(batches[-1][0].replace("Z", "+00:00")).timestamp() + batches[-1][1] / 1000
    rows = [
        ("interpreter start", m["start"] - spawned),
        ("pyspark import", m["imported"] - m["start"]),
        ("session start and settings", m["session"] - m["imported"]),
        ("query start (plan, start())", m["started"] - m["session"]),
        ("query start to first batch start", first - m["started"]),
        ("the query: first batch start to last batch end", last - first),
        ("last batch end to awaitTermination's return", m["query"] - last),
        ("stop", m["stopped"] - m["query"]),
    ]
    rows.append(("interpreter exit (JVM's end)", spawned + wall - m["stopped"]))
    return wall, rows


def phases(args: argparse.Namespace) -> None:
    """Fresh `tidemark run`s with clocked phases and hand-written jobs with their own marks, interleaved: medians."""
    work = Path(args.dir).resolve()
    runs = work / "phases"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    table: dict[str, tuple[list[float], list[list[tuple[str, float]]]]] = {"tidemark": ([], []), "job": ([], [])}
    with _broker(work) as bootstrap:
        for index in range(args.rounds):
            for which, measure in (("tidemark", _tidemark_phases), ("job", _job_phases)):
                wall, rows = measure(work, runs, index, bootstrap)
                table[which][0].append(wall)
                table[which][1].append(rows)
                print(f"round {index} {which}: {wall:.1f}s", flush=True)
    for which, (walls, all_rows) in table.items():
        print(f"\n{which}: wall {spread(walls)} s (min / median / max); phases, median [min-max] s")
        for position, (name, _) in enumerate(all_rows[0]):
            values = [rows[position][1] for rows in all_rows]
            print(f"  {name:<62} {statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]")


def _query_span(monitor_dir: Path) -> tuple[float, float, float]:
    """First batch's start to last batch's end, from the run's progress log."""
    from datetime import datetime

    starts: list[tuple[float, float]] = []
    for file in monitor_dir.rglob("*.jsonl"):
        for line in file.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            progress = record.get("progress", record)
            if "batchDuration" in progress and "timestamp" in progress:
                at = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
                starts.append((at, at + progress["batchDuration"] / 1000))
    if not starts:
        return 0.0, 0.0, 0.0
    first, last = min(s for s, _ in starts), max(e for _, e in starts)
    return last - first, first, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("dir")
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--keys", type=int, default=2000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--files-per-trigger", type=int, default=4, help="0: no limit (the catch-up figure)")
    p.add_argument("--source", choices=["files", "kafka"], default="files", help="kafka: a broker `compare` starts")
    p.add_argument("--sink", choices=["parquet", "delta"], default="parquet")
    c = commands.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("--rounds", type=int, default=5)
    c.add_argument("--baseline", choices=["stream", "batch"], default="stream")
    c.add_argument("--proof", action="store_true", help="compare the outputs every round, not only the first")
    f = commands.add_parser("phases")
    f.add_argument("dir")
    f.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    {"prepare": prepare, "compare": compare, "phases": phases}[args.command](args)


if __name__ == "__main__":
    main()
