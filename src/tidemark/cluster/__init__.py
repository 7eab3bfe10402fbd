"""A local Spark standalone cluster for trying and testing cluster mode on one machine."""

from __future__ import annotations

from tidemark.cluster.model import (
    DEFAULT_RUN_DIR,
    ClusterError,
    ClusterRecord,
    ClusterStatus,
    ProcessRecord,
    Role,
    StopResult,
    WorkerStatus,
    client_conf,
)
from tidemark.cluster.standalone import cluster_down, cluster_status, cluster_up, kill_worker, master_json

__all__ = [
    "DEFAULT_RUN_DIR",
    "ClusterError",
    "ClusterRecord",
    "ClusterStatus",
    "ProcessRecord",
    "Role",
    "StopResult",
    "WorkerStatus",
    "client_conf",
    "cluster_down",
    "cluster_status",
    "cluster_up",
    "kill_worker",
    "master_json",
]
