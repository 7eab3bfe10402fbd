"""Typed records of a local standalone cluster: what was started, and what it looks like now."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.compat import StrEnum
from tidemark.errors import EnvironmentProblem

RECORD_FILE = "cluster.json"
DEFAULT_RUN_DIR = ".tidemark-cluster"


class ClusterError(EnvironmentProblem):
    """The local cluster could not be started, reached or stopped."""


class Role(StrEnum):
    """The kind of daemon a process is."""

    MASTER = "master"
    WORKER = "worker"


@dataclass(frozen=True)
class ProcessRecord:
    """One daemon tidemark started: enough to find it again and to be sure it is still the same process."""

    role: Role
    index: int
    pid: int
    start_ticks: int | None
    port: int
    webui_port: int
    log: str

    @property
    def name(self) -> str:
        """'master' or 'worker-<n>'."""
        return "master" if self.role is Role.MASTER else f"worker-{self.index}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        """Build from the dict written by to_json."""
        return cls(
            role=Role(data["role"]),
            index=int(data["index"]),
            pid=int(data["pid"]),
            start_ticks=None if data.get("start_ticks") is None else int(data["start_ticks"]),
            port=int(data["port"]),
            webui_port=int(data["webui_port"]),
            log=str(data["log"]),
        )


@dataclass(frozen=True)
class ClusterRecord:
    """The run folder's cluster.json: the master URL and every daemon started there."""

    run_dir: str
    master_url: str
    webui_url: str
    worker_cores: int
    worker_memory: str
    processes: tuple[ProcessRecord, ...]

    @property
    def master(self) -> ProcessRecord:
        """The master's record."""
        return next(p for p in self.processes if p.role is Role.MASTER)

    @property
    def workers(self) -> tuple[ProcessRecord, ...]:
        """The workers' records, in start order."""
        return tuple(p for p in self.processes if p.role is Role.WORKER)

    def to_json(self) -> str:
        """Serialise for cluster.json."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterRecord:
        """Build from the parsed content of cluster.json."""
        return cls(
            run_dir=str(data["run_dir"]),
            master_url=str(data["master_url"]),
            webui_url=str(data["webui_url"]),
            worker_cores=int(data["worker_cores"]),
            worker_memory=str(data["worker_memory"]),
            processes=tuple(ProcessRecord.from_json(p) for p in data["processes"]),
        )

    @classmethod
    def load(cls, run_dir: Path) -> ClusterRecord | None:
        """The record in run_dir, or None when no cluster was started there."""
        file = run_dir / RECORD_FILE
        if not file.exists():
            return None
        try:
            return cls.from_json(json.loads(file.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"{file} is not a tidemark cluster record ({exc}); delete it if no cluster is running"
            raise ClusterError(msg) from exc


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as seen by its pid and by the master."""

    name: str
    pid: int
    process_alive: bool
    master_state: str | None  # ALIVE, DEAD, ... or None when the master does not list it
    cores: int | None
    memory_mb: int | None
    log: str


@dataclass(frozen=True)
class ClusterStatus:
    """The cluster as it is now."""

    run_dir: str
    master_url: str
    webui_url: str
    master_pid: int
    master_alive: bool
    master_reachable: bool
    workers: tuple[WorkerStatus, ...]
    alive_workers: int
    active_apps: tuple[str, ...] = field(default_factory=tuple)
    # The Spark settings a client-mode driver on this machine needs to use the cluster.
    spark_conf: dict[str, str] = field(default_factory=dict)


def client_conf(master_url: str) -> dict[str, str]:
    """Spark settings for a driver on this machine that runs against the loopback cluster."""
    return {
        "spark.master": master_url,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


@dataclass(frozen=True)
class StopResult:
    """What `cluster down` stopped."""

    run_dir: str
    stopped: tuple[str, ...]
    already_gone: tuple[str, ...]
    forced: tuple[str, ...]
