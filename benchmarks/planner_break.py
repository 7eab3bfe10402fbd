"""Does `tidemark plan memory` predict where a growing stateful query runs out of memory? (run by hand)

Grid: state store (HDFS-backed, RocksDB with tidemark's bounded memory) x heap (1g, 2g) x key (one string, or
four columns) x value (a count, or six aggregates). Each probe is its own local[2] JVM (benchmarks/_break_child.py)
that grows the state to N keys in batches of 500,000 rows, then updates 500,000 existing keys in each of two more
batches. A probe breaks when the JVM throws OutOfMemoryError or dies, when it spends >= 90 % of a minute in GC
pauses (G1 thrashes long before it throws), or, for RocksDB, when the kernel kills it for passing the container's
memory limit (a cgroup v1 memory controller, the way YARN and Kubernetes enforce memoryOverhead).

Commands:
  calibrate [--from FILES]   heap calibration runs (live heap after System.gc() between batches) for both row shapes
                             with maxBatchesToRetainInMemory 1 and 2; prints the per-row and per-map-entry bytes.
  cell NAME [--probes N]     predict the cell's break with the planner, then probe: first at predicted / 1.2 and
                             predicted / 0.8 (both must hold for "within 20 %"), then bisect while probes remain.
  fit-working NAME OK FAIL   the batch working factor that centres the cell's prediction in its measured interval.
  report [--out FILE]        the results table (markdown) of every cell run so far.
  list                       the cells and their predictions.

Results: BENCHMARKS.md ("Memory planner: predicted vs measured break") and docs/plan.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.config.model import StateStoreKind
from tidemark.sizing import resident
from tidemark.sizing.breaking import break_point
from tidemark.sizing.load import spark_memory
from tidemark.sizing.memory import MemoryConf
from tidemark.sizing.resident import RowShape, Workload, unsafe_row_bytes

CHILD = Path(__file__).with_name("_break_child.py")
BATCH_ROWS = 500_000
EXTRA_BATCHES = 2
PARTITIONS = 2
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
MIB = 2**20


def say(text: str) -> None:
    """Print at once: the probes take minutes and the output is often piped to a file."""
    print(text, flush=True)


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    store: str
    heap: str
    key_shape: str
    value_shape: str
    bounded_mb: int | None = None
    keys: int | None = None  # RocksDB: the fixed key count at which the container limit is bisected

    @property
    def name(self) -> str:
        """hdfs-1g-small-small, rocksdb-1g-small-small-256m."""
        base = f"{self.store}-{self.heap}-{self.key_shape}-{self.value_shape}"
        return f"{base}-{self.bounded_mb}m" if self.bounded_mb else base


CELLS = {
    c.name: c
    for c in (
        Cell("hdfs", "1g", "small", "small"),
        Cell("hdfs", "1g", "wide", "wide"),
        Cell("hdfs", "1g", "small", "wide"),
        Cell("hdfs", "1g", "wide", "small"),
        Cell("hdfs", "2g", "small", "small"),
        Cell("hdfs", "2g", "wide", "wide"),
        Cell("hdfs", "2g", "small", "wide"),
        Cell("hdfs", "2g", "wide", "small"),
        Cell("rocksdb", "1g", "small", "small", bounded_mb=256, keys=1_500_000),
        Cell("rocksdb", "2g", "wide", "wide", bounded_mb=256, keys=1_500_000),
    )
}


def row_shape(key_shape: str, value_shape: str, keys: int) -> RowShape:
    """The UnsafeRow sizes of the child's key and aggregation buffer, as a state reader would measure them."""
    digits = len(str(max(1, keys - 1)))
    key_text = 1 + digits  # "k" + id
    if key_shape == "small":
        key = unsafe_row_bytes(1, [key_text])
    else:  # k (string), k_int, k_long, k_region ("region-" + 2 digits)
        key = unsafe_row_bytes(4, [key_text, len("region-96")])
    # count | count, sum, min, max, avg (sum and count), max(timestamp)
    value = unsafe_row_bytes(1) if value_shape == "small" else unsafe_row_bytes(7)
    return RowShape(float(key), float(value), origin="schema of the benchmark query")


def conf_of(cell: Cell) -> MemoryConf:
    """The planner's view of the probe's executor (local mode: the driver is the one executor)."""
    store = StateStoreKind.HDFS if cell.store == "hdfs" else StateStoreKind.ROCKSDB
    bounded = cell.bounded_mb * MIB if cell.bounded_mb else None
    return MemoryConf(
        executor_memory_bytes=spark_memory(cell.heap), cores=2, state_store=store, rocksdb_bounded_bytes=bounded
    )


def predict_keys(cell: Cell) -> float:
    """The planner's break in keys for an HDFS cell (the shape depends a little on the key count)."""
    keys = 1_000_000
    for _ in range(5):
        workload = Workload(keys=keys, batch_rows=BATCH_ROWS, updated_per_batch=BATCH_ROWS, state_instances=PARTITIONS)
        point = break_point(conf_of(cell), row_shape(cell.key_shape, cell.value_shape, keys), workload)
        assert point.keys_at_break is not None
        keys = int(point.keys_at_break)
    return float(keys)


# stateOnCurrentVersionSizeBytes / rows in the calibration runs (median over batches): what a progress log says.
SIZE_ESTIMATOR_PER_KEY = {"small": 193.9, "wide": 221.0}


def predict_keys_from_log(cell: Cell) -> float | None:
    """The break the planner gives with only a progress log (row sizes from SizeEstimator), same-shape cells."""
    if cell.key_shape != cell.value_shape:
        return None
    shape = resident.shape_from_version_bytes(SIZE_ESTIMATOR_PER_KEY[cell.key_shape])
    workload = Workload(keys=0, batch_rows=BATCH_ROWS, updated_per_batch=BATCH_ROWS, state_instances=PARTITIONS)
    return break_point(conf_of(cell), shape, workload).keys_at_break


def predict_container(cell: Cell) -> float:
    """The planner's smallest container (bytes) for a RocksDB cell: heap + JVM native + RocksDB's cap."""
    assert cell.keys is not None
    workload = Workload(keys=cell.keys, batch_rows=BATCH_ROWS, updated_per_batch=BATCH_ROWS, state_instances=PARTITIONS)
    point = break_point(conf_of(cell), row_shape(cell.key_shape, cell.value_shape, cell.keys), workload)
    return point.peak_bytes_now


@dataclass
class Probe:
    """One child run."""

    keys: int
    container_mb: int | None
    ok: bool
    outcome: str
    seconds: float
    batches: int
    max_gc_share: float
    rss_hwm_mb: float
    cgroup_max_mb: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _cgroup(limit_mb: int) -> Path:
    path = CGROUP_ROOT / f"tidemark-planner-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    (path / "memory.limit_in_bytes").write_text(str(limit_mb * MIB))
    return path


def _java_home_into(group: Path, folder: Path) -> Path:
    """A JAVA_HOME whose bin/java joins the cgroup, then becomes the real java: only the JVM is in the container.

    Memory is charged to the cgroup a process is in when it touches it, so the JVM has to start inside.
    """
    real = Path(os.environ.get("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")) / "bin" / "java"
    if not real.exists():
        real = Path(subprocess.run(["which", "java"], capture_output=True, text=True, check=True).stdout.strip())
    home = folder / "java-home"
    (home / "bin").mkdir(parents=True)
    wrapper = home / "bin" / "java"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {group}/cgroup.procs\nexec {real.resolve()} "$@"\n')
    wrapper.chmod(0o755)
    return home


def _oom_kills(path: Path) -> int:
    for line in (path / "memory.oom_control").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def probe(cell: Cell, keys: int, container_mb: int | None = None, timeout: float = 2400) -> Probe:
    """Run one child JVM at this key count (and container limit) and classify its end."""
    spec: dict[str, Any] = {
        "store": cell.store,
        "heap": cell.heap,
        "keys": keys,
        "batch_rows": BATCH_ROWS,
        "extra_batches": EXTRA_BATCHES,
        "partitions": PARTITIONS,
        "key_shape": cell.key_shape,
        "value_shape": cell.value_shape,
    }
    if cell.bounded_mb:
        spec["bounded_mb"] = cell.bounded_mb
    group = None
    if container_mb is not None:
        # The heap is touched up front (-Xms = -Xmx, AlwaysPreTouch): the container must hold the heap the JVM
        # may grow to, whatever this short run happens to touch.
        spec["java_options"] = [f"-Xms{cell.heap}", "-XX:+AlwaysPreTouch"]
        group = _cgroup(container_mb)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        command = [sys.executable, str(CHILD), json.dumps(spec), str(out)]
        env = dict(os.environ)
        if group is not None:
            env["JAVA_HOME"] = str(_java_home_into(group, Path(tmp)))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)
            stderr = done.stderr or ""
        except subprocess.TimeoutExpired as exc:
            stderr = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            stderr += f"\nno end within {timeout:.0f}s"
        record: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    seconds = time.monotonic() - start
    cgroup_max = None
    killed = 0
    if group is not None:
        cgroup_max = int((group / "memory.max_usage_in_bytes").read_text()) / MIB
        killed = _oom_kills(group)
        for _ in range(20):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.5)
    outcome = record.get("outcome", "failed: no result")
    if killed:
        outcome = f"failed: container memory limit ({container_mb} MB): the kernel killed the JVM"
    elif outcome in ("running", "failed: no result") or (outcome != "ok" and "OutOfMemoryError" in stderr):
        oom = "OutOfMemoryError" in stderr
        tail = " ".join(line for line in stderr.strip().splitlines()[-2:])[:200]
        outcome = f"failed: {'java.lang.OutOfMemoryError' if oom else 'JVM ended'} ({tail})"
    batches = record.get("batches", [])
    return Probe(
        keys=keys,
        container_mb=container_mb,
        ok=outcome == "ok",
        outcome=outcome,
        seconds=seconds,
        batches=len(batches),
        max_gc_share=float(record.get("max_gc_share", 0.0)),
        rss_hwm_mb=record.get("rss_hwm_kib", 0) / 1024,
        cgroup_max_mb=cgroup_max,
        detail={"batches": batches, "baseline_rss_kib": record.get("baseline_rss_kib")},
    )


def _report(cell: Cell, probe_result: Probe) -> None:
    where = f"{probe_result.keys:>10,} keys" + (
        f", container {probe_result.container_mb} MB" if probe_result.container_mb else ""
    )
    extra = f", cgroup peak {probe_result.cgroup_max_mb:,.0f} MB" if probe_result.cgroup_max_mb else ""
    say(
        f"  {cell.name} {where}: {'ok' if probe_result.ok else probe_result.outcome[:150]} "
        f"({probe_result.seconds:.0f} s, {probe_result.batches} batches, GC share max "
        f"{probe_result.max_gc_share:.0%}, RSS peak {probe_result.rss_hwm_mb:,.0f} MB{extra})"
    )


def run_hdfs_cell(cell: Cell, probes: int, low: int | None, high: int | None) -> dict[str, Any]:
    """Probe at predicted / 1.2 and / 0.8, then bisect (geometric middle) while probes remain."""
    predicted = predict_keys(cell)
    say(f"{cell.name}: planner predicts the break at {predicted:,.0f} keys")
    ok_at: int | None = None
    fail_at: int | None = None
    plan = [low or int(predicted / 1.2), high or int(predicted / 0.8)]
    results: list[Probe] = []
    while len(results) < probes:
        if plan:
            keys = plan.pop(0)
        elif ok_at is not None and fail_at is not None:
            keys = int(math.sqrt(ok_at * fail_at))
        elif ok_at is not None:
            keys = int(ok_at * 1.25)
        else:
            assert fail_at is not None
            keys = int(fail_at / 1.25)
        result = probe(cell, keys)
        results.append(result)
        _report(cell, result)
        if result.ok:
            ok_at = max(ok_at or 0, keys)
        else:
            fail_at = min(fail_at or keys, keys)
        if ok_at is not None and fail_at is not None and fail_at <= ok_at:
            say("  (a larger key count held where a smaller one broke: noise at the edge; kept both)")
    return {
        "cell": asdict(cell),
        "predicted_keys": predicted,
        "measured_ok": ok_at,
        "measured_fail": fail_at,
        "probes": [asdict(r) | {"detail": None} for r in results],
    }


def run_rocksdb_cell(cell: Cell, probes: int, low: int | None, high: int | None) -> dict[str, Any]:
    """Bisect the container limit at a fixed key count; the predicted break is the planner's container need."""
    assert cell.keys is not None
    predicted = predict_container(cell) / MIB
    say(f"{cell.name}: planner says the container needs {predicted:,.0f} MB at {cell.keys:,} keys")
    fail_at: int | None = None
    ok_at: int | None = None
    plan = [low or int(predicted / 1.2), high or int(predicted / 0.8)]
    results: list[Probe] = []
    while len(results) < probes:
        if plan:
            limit = plan.pop(0)
        elif ok_at is not None and fail_at is not None:
            limit = int(math.sqrt(ok_at * fail_at))
        elif ok_at is not None:
            limit = int(ok_at / 1.2)
        else:
            assert fail_at is not None
            limit = int(fail_at * 1.2)
        result = probe(cell, cell.keys, container_mb=limit)
        results.append(result)
        _report(cell, result)
        if result.ok:
            ok_at = min(ok_at or limit, limit)
        else:
            fail_at = max(fail_at or 0, limit)
    return {
        "cell": asdict(cell),
        "predicted_container_mb": predicted,
        "measured_fail_mb": fail_at,
        "measured_ok_mb": ok_at,
        "probes": [asdict(r) | {"detail": None} for r in results],
    }


# --- heap calibration -----------------------------------------------------------------------------------------


def calibration_runs(out_dir: Path) -> list[Path]:
    """Four runs with the live heap measured between batches: both shapes x maxBatchesToRetainInMemory 1 and 2."""
    paths = []
    for shape in ("small", "wide"):
        for retained in (1, 2):
            spec = {
                "store": "hdfs",
                "heap": "1g",
                "keys": 400_000,
                "batch_rows": 100_000,
                "extra_batches": 2,
                "key_shape": shape,
                "value_shape": shape,
                "measure_heap": True,
                "conf": {"spark.sql.streaming.maxBatchesToRetainInMemory": str(retained)},
            }
            path = out_dir / f"calibrate-{shape}-r{retained}.json"
            subprocess.run([sys.executable, str(CHILD), json.dumps(spec), str(path)], capture_output=True, check=False)
            paths.append(path)
            say(f"  {path.name}: {json.loads(path.read_text())['outcome']}")
    return paths


def fit(paths: list[Path]) -> dict[str, float]:
    """Per-key live heap between growth batches (retain 1: row + entry; retain 2: row + 2 entries) and updates."""
    growth: dict[tuple[str, int], float] = {}
    update: dict[tuple[str, int], float] = {}
    version: dict[str, float] = {}
    for path in paths:
        data = json.loads(path.read_text())
        spec = data["spec"]
        retained = int(spec.get("conf", {}).get("spark.sql.streaming.maxBatchesToRetainInMemory", "2"))
        heap = [h["live_heap"] for h in data["heap"]]
        batches = data["batches"]
        step = spec["batch_rows"]
        growing = math.ceil(spec["keys"] / step)
        # batch 0 carries the query's own first allocations; growth steps are 1..growing-1
        growth[(spec["key_shape"], retained)] = statistics.median(
            (heap[b] - heap[b - 1]) / step for b in range(1, growing)
        )
        update[(spec["key_shape"], retained)] = (heap[growing] - heap[growing - 1]) / step
        version[spec["key_shape"]] = statistics.median(
            b["current_version_bytes"] / b["rows"] for b in batches if b["rows"]
        )
    result: dict[str, float] = {}
    for shape in ("small", "wide"):
        entry = growth[(shape, 2)] - growth[(shape, 1)]
        row = growth[(shape, 1)] - entry
        data_bytes = row_shape(shape, shape, 400_000).data_bytes
        value = row_shape(shape, shape, 400_000).value_bytes
        result[f"{shape}.entry_bytes"] = entry
        result[f"{shape}.row_overhead_bytes"] = row - data_bytes
        # retain 2, first update batch: one value row per updated key plus one more map's entry per key
        result[f"{shape}.value_copy_overhead_bytes"] = update[(shape, 2)] - entry - value
        result[f"{shape}.size_estimator_per_key"] = version[shape]
        result[f"{shape}.live_per_key_one_version"] = growth[(shape, 1)]
    return result


def fit_working(cell: Cell, ok_keys: int, fail_keys: int) -> float:
    """The BATCH_WORKING_FACTOR that puts the cell's predicted break at the geometric middle of its interval."""
    middle = math.sqrt(ok_keys * fail_keys)
    shape = row_shape(cell.key_shape, cell.value_shape, int(middle))
    workload = Workload(keys=middle, batch_rows=BATCH_ROWS, updated_per_batch=BATCH_ROWS, state_instances=PARTITIONS)
    saved = resident.BATCH_WORKING_FACTOR
    resident.BATCH_WORKING_FACTOR = 0.0
    try:
        footprint = resident.hdfs_footprint(shape, workload, spark_memory(cell.heap))
    finally:
        resident.BATCH_WORKING_FACTOR = saved
    room = spark_memory(cell.heap) - footprint.peak_bytes(middle)
    return room / (BATCH_ROWS * (shape.data_bytes + resident.BATCH_ROW_OVERHEAD_BYTES))


def report(path: Path) -> None:
    """One markdown row per cell from the results file: every probe of every run of the cell counts."""
    probes: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        result = json.loads(line)
        name = Cell(**result["cell"]).name
        probes.setdefault(name, []).extend(result["probes"])
    say(
        "| cell | predicted | measured: held at | broke at | predicted / measured | within 20 % | "
        "from a log alone | probes |"
    )
    say("|---|---:|---:|---:|---:|---|---:|---|")
    for name, runs in probes.items():
        cell = CELLS[name]
        if cell.store == "hdfs":
            held = max((p["keys"] for p in runs if p["ok"]), default=None)
            broke = min((p["keys"] for p in runs if not p["ok"]), default=None)
            predicted = predict_keys(cell)
            from_log = predict_keys_from_log(cell)
            log_text = f"{from_log:,.0f}" if from_log else "-"
            unit = ""
        else:
            held = min((p["container_mb"] for p in runs if p["ok"]), default=None)
            broke = max((p["container_mb"] for p in runs if not p["ok"]), default=None)
            predicted = predict_container(cell) / MIB
            log_text = "-"
            unit = " MB"
        if held is None or broke is None:
            ratio, within = "-", "open interval"
        else:
            low, high = sorted((held, broke))
            ratio = f"{predicted / high:.2f}-{predicted / low:.2f}"
            # The first two probes sit at int(predicted / 1.2) and int(predicted / 0.8): allow their rounding.
            inside = predicted / 1.2 <= low * 1.001 and high <= predicted / 0.8 * 1.001
            edge = predicted / low > 1.19 or predicted / high < 0.81
            within = ("yes, at the edge" if edge else "yes") if inside else "no"
        listed = ", ".join(
            f"{p['keys'] if cell.store == 'hdfs' else p['container_mb']:,}{unit} {'ok' if p['ok'] else 'broke'}"
            for p in runs
        )
        say(
            f"| {name} | {predicted:,.0f}{unit} | {held or '-':,}{unit} | {broke or '-':,}{unit} | {ratio} | "
            f"{within} | {log_text} | {listed} |"
        )


def main() -> None:
    """calibrate | cell NAME | fit-working NAME OK FAIL | report | list."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["calibrate", "cell", "fit-working", "report", "list"])
    parser.add_argument("name", nargs="?")
    parser.add_argument("interval", nargs="*", type=int, help="fit-working: the last ok and the first failed keys")
    parser.add_argument("--probes", type=int, default=2)
    parser.add_argument("--low", type=int, help="first probe (keys, or container MB for RocksDB)")
    parser.add_argument("--high", type=int, help="second probe")
    parser.add_argument("--from", dest="from_files", nargs="*", type=Path, help="calibration JSON already made")
    parser.add_argument("--batch-working", type=float, help="override BATCH_WORKING_FACTOR (what-if)")
    parser.add_argument("--out", type=Path, default=Path("planner_break_results.jsonl"))
    args = parser.parse_args()
    if args.batch_working is not None:
        # Only for the calibration cell's what-if; the planner's value lives in tidemark.sizing.resident.
        resident.BATCH_WORKING_FACTOR = args.batch_working
    if args.command == "list":
        for cell in CELLS.values():
            if cell.store == "hdfs":
                from_log = predict_keys_from_log(cell)
                log_text = f" (from a progress log alone: {from_log:,.0f})" if from_log else ""
                say(f"{cell.name}: predicted break {predict_keys(cell):,.0f} keys{log_text}")
            else:
                say(f"{cell.name}: predicted container {predict_container(cell) / MIB:,.0f} MB at {cell.keys:,} keys")
        return
    if args.command == "report":
        report(args.out)
        return
    if args.command == "calibrate":
        paths = args.from_files or calibration_runs(Path(tempfile.mkdtemp(prefix="planner-calibrate-")))
        for key, value in fit(paths).items():
            say(f"{key}: {value:.1f}")
        return
    cell = CELLS[args.name]
    if args.command == "fit-working":
        say(f"BATCH_WORKING_FACTOR = {fit_working(cell, *args.interval):.3f}")
        return
    if cell.store == "hdfs":
        result = run_hdfs_cell(cell, args.probes, args.low, args.high)
    else:
        result = run_rocksdb_cell(cell, args.probes, args.low, args.high)
    with args.out.open("a") as out:
        out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
