"""A local Spark standalone cluster on 127.0.0.1: `up`, `down`, `status`, and killing a worker on purpose."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tidemark.cluster import processes
from tidemark.cluster.model import (
    RECORD_FILE,
    ClusterError,
    ClusterRecord,
    ClusterStatus,
    ProcessRecord,
    Role,
    StopResult,
    WorkerStatus,
    client_conf,
)
from tidemark.errors import UsageError
from tidemark.sizes import parse_size
from tidemark.steps import step

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# The REST submission server listens on a fixed port (6066) by default; two clusters would collide.
_DAEMON_PROPERTIES = "spark.master.rest.enabled false\nspark.worker.ui.retainedExecutors 10\n"


def master_json(webui_url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The master's /json/ view (workers, apps), or None when it does not answer."""
    url = webui_url.rstrip("/") + "/json/"
    if not url.startswith("http://127.0.0.1:"):
        msg = f"refusing to query {url}: the local cluster's web UI is always on http://127.0.0.1"
        raise ClusterError(msg)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback http only)
            data: dict[str, Any] = json.loads(response.read().decode("utf-8"))
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _alive_count(view: dict[str, Any] | None) -> int:
    if view is None:
        return 0
    return sum(1 for worker in view.get("workers", []) if worker.get("state") == "ALIVE")


def _tail(path: str, lines: int = 5) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _running(record: ClusterRecord) -> list[ProcessRecord]:
    return [p for p in record.processes if processes.is_ours(p)]


def _check_request(workers: int, cores: int, memory: str) -> str:
    if workers < 1:
        msg = f"--workers must be at least 1 (got {workers})"
        raise UsageError(msg)
    if cores < 1:
        msg = f"--cores must be at least 1 (got {cores})"
        raise UsageError(msg)
    size = parse_size(memory)
    if size < 512 * 1024**2:
        msg = f"--memory {memory} is too small for a worker; give at least 512m (executors default to 1g)"
        raise UsageError(msg)
    return f"{size // 1024**2}m"


def cluster_up(
    run_dir: str | Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout: float = 90.0,
) -> ClusterStatus:
    """Start a master and `workers` workers on 127.0.0.1 and wait until all are ALIVE in the master."""
    worker_memory = _check_request(workers, cores, memory)
    folder = Path(run_dir).resolve()
    existing = ClusterRecord.load(folder)
    if existing is not None and _running(existing):
        msg = f"a cluster is already running from {folder} ({existing.master_url}); run 'tidemark cluster down' first"
        raise ClusterError(msg)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    properties = folder / "spark-daemon.conf"
    properties.write_text(_DAEMON_PROPERTIES, encoding="utf-8")
    home = processes.spark_home()
    env = processes.daemon_environment(home)

    port, webui = processes.free_port(), processes.free_port()
    master_log = folder / "logs" / "master.log"
    master_args = [MASTER_CLASS, "--host", processes.LOOPBACK, "--port", str(port), "--webui-port", str(webui)]
    pid = processes.start_daemon(home, [*master_args, "--properties-file", str(properties)], master_log, env)
    started = [ProcessRecord(Role.MASTER, 0, pid, processes.start_ticks(pid), port, webui, str(master_log))]
    master_url = f"spark://{processes.LOOPBACK}:{port}"
    webui_url = f"http://{processes.LOOPBACK}:{webui}"
    for index in range(1, workers + 1):
        work_dir = folder / f"work-{index}"
        work_dir.mkdir(exist_ok=True)
        worker_port, worker_webui = processes.free_port(), processes.free_port()
        worker_log = folder / "logs" / f"worker-{index}.log"
        args = [
            WORKER_CLASS,
            master_url,
            *("--host", processes.LOOPBACK, "--port", str(worker_port), "--webui-port", str(worker_webui)),
            *("--cores", str(cores), "--memory", worker_memory, "--work-dir", str(work_dir)),
            *("--properties-file", str(properties)),
        ]
        pid = processes.start_daemon(home, args, worker_log, env)
        started.append(
            ProcessRecord(
                Role.WORKER, index, pid, processes.start_ticks(pid), worker_port, worker_webui, str(worker_log)
            )
        )
    record = ClusterRecord(str(folder), master_url, webui_url, cores, worker_memory, tuple(started))
    (folder / RECORD_FILE).write_text(record.to_json(), encoding="utf-8")
    _wait_alive(record, workers, timeout)
    return cluster_status(folder)


def _wait_alive(record: ClusterRecord, workers: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    shown = 0
    with step(f"waiting for {workers} worker(s) to register with {record.master_url}", total=workers) as advance:
        while time.monotonic() < deadline:
            dead = [p for p in record.processes if not processes.is_ours(p)]
            if dead:
                first = dead[0]
                cluster_down(record.run_dir)
                msg = f"the {first.name} exited while starting; see {first.log}: {_tail(first.log)}"
                raise ClusterError(msg)
            alive = _alive_count(master_json(record.webui_url))
            advance(max(alive - shown, 0))
            shown = max(shown, alive)
            if alive >= workers:
                return
            time.sleep(0.5)
    alive = _alive_count(master_json(record.webui_url))
    cluster_down(record.run_dir)
    msg = (
        f"only {alive} of {workers} workers registered with {record.master_url} within {timeout:.0f}s; "
        f"the cluster was stopped; see the logs in {record.run_dir}/logs (or retry with a longer --timeout)"
    )
    raise ClusterError(msg)


def _load(run_dir: str | Path) -> ClusterRecord:
    folder = Path(run_dir).resolve()
    record = ClusterRecord.load(folder)
    if record is None:
        msg = f"no cluster was started from {folder} (start one with 'tidemark cluster up --run-dir {run_dir}')"
        raise ClusterError(msg)
    return record


def _worker_status(proc: ProcessRecord, listed: dict[int, dict[str, Any]]) -> WorkerStatus:
    seen = listed.get(proc.port)
    return WorkerStatus(
        name=proc.name,
        pid=proc.pid,
        process_alive=processes.is_ours(proc),
        master_state=None if seen is None else str(seen.get("state")),
        cores=None if seen is None else int(seen.get("cores", 0)),
        memory_mb=None if seen is None else int(seen.get("memory", 0)),
        log=proc.log,
    )


def status_from(record: ClusterRecord, view: dict[str, Any] | None) -> ClusterStatus:
    """Combine the started daemons' pids with the master's view of its workers."""
    listed: dict[int, dict[str, Any]] = {}
    for worker in (view or {}).get("workers", []):
        port = worker.get("port")
        # A worker that re-registers gets a new entry; keep the most telling state (ALIVE wins).
        if isinstance(port, int) and (port not in listed or worker.get("state") == "ALIVE"):
            listed[port] = worker
    apps = tuple(str(app.get("name", app.get("id"))) for app in (view or {}).get("activeapps", []))
    return ClusterStatus(
        run_dir=record.run_dir,
        master_url=record.master_url,
        webui_url=record.webui_url,
        master_pid=record.master.pid,
        master_alive=processes.is_ours(record.master),
        master_reachable=view is not None,
        workers=tuple(_worker_status(p, listed) for p in record.workers),
        alive_workers=_alive_count(view),
        active_apps=apps,
        spark_conf=client_conf(record.master_url),
    )


def cluster_status(run_dir: str | Path) -> ClusterStatus:
    """Report the master URL, each worker's process and its state in the master."""
    record = _load(run_dir)
    view = master_json(record.webui_url) if processes.is_ours(record.master) else None
    return status_from(record, view)


def cluster_down(run_dir: str | Path, timeout: float = 20.0) -> StopResult:
    """Stop, by recorded pid, every daemon this run folder started (workers first, then the master)."""
    record = _load(run_dir)
    outcome: dict[str, list[str]] = {"stopped": [], "gone": [], "forced": []}
    daemons = (*record.workers, record.master)
    with step(f"stopping {len(daemons)} daemon(s) of {record.master_url}", total=len(daemons)) as advance:
        for proc in daemons:
            outcome[processes.stop(proc, timeout)].append(proc.name)
            advance(1)
    return StopResult(record.run_dir, tuple(outcome["stopped"]), tuple(outcome["gone"]), tuple(outcome["forced"]))


def kill_worker(run_dir: str | Path, index: int, graceful: bool = False) -> WorkerStatus:
    """Kill worker `index` and its executors (SIGKILL, like a lost machine; SIGTERM when graceful)."""
    record = _load(run_dir)
    chosen = [w for w in record.workers if w.index == index]
    if not chosen:
        names = ", ".join(str(w.index) for w in record.workers)
        msg = f"no worker {index} in {record.run_dir} (workers: {names})"
        raise UsageError(msg)
    worker = chosen[0]
    if not processes.send_signal(worker, signal.SIGTERM if graceful else signal.SIGKILL):
        msg = f"{worker.name} (pid {worker.pid}) is not running"
        raise ClusterError(msg)
    processes.wait_gone(worker, 20.0)
    return cluster_status(run_dir).workers[record.workers.index(worker)]
