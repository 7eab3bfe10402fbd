"""The local cluster's bookkeeping without starting Spark: records, status from the master's JSON, pid checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.cluster import ClusterError, ClusterRecord, ProcessRecord, Role, cluster_down, cluster_status, cluster_up
from tidemark.cluster.processes import free_port, is_ours, start_ticks, stop
from tidemark.cluster.standalone import kill_worker, master_json, status_from
from tidemark.errors import UsageError


def _record(tmp_path: Path, pids: tuple[int, int, int] = (999_991, 999_992, 999_993)) -> ClusterRecord:
    master = ProcessRecord(Role.MASTER, 0, pids[0], None, 7077, 8080, str(tmp_path / "master.log"))
    workers = tuple(
        ProcessRecord(Role.WORKER, i, pids[i], None, 7000 + i, 8000 + i, str(tmp_path / f"worker-{i}.log"))
        for i in (1, 2)
    )
    return ClusterRecord(
        str(tmp_path), "spark://127.0.0.1:7077", "http://127.0.0.1:8080", 1, "1024m", (master, *workers)
    )


def test_record_round_trips_through_json(tmp_path: Path) -> None:
    record = _record(tmp_path)
    (tmp_path / "cluster.json").write_text(record.to_json())
    loaded = ClusterRecord.load(tmp_path)
    assert loaded == record
    assert loaded.master.name == "master"
    assert [w.name for w in loaded.workers] == ["worker-1", "worker-2"]


def test_corrupt_record_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterError, match="not a tidemark cluster record"):
        ClusterRecord.load(tmp_path)


def test_status_merges_master_view_with_pids(tmp_path: Path) -> None:
    view = {
        "workers": [
            {"port": 7001, "state": "DEAD", "cores": 1, "memory": 1024},
            {"port": 7001, "state": "ALIVE", "cores": 1, "memory": 1024},  # re-registered: ALIVE wins
            {"port": 7002, "state": "DEAD", "cores": 1, "memory": 1024},
            {"port": 9999, "state": "ALIVE", "cores": 4, "memory": 4096},  # not ours: counted, not listed
        ],
        "activeapps": [{"id": "app-1", "name": "tidemark-demo"}],
    }
    status = status_from(_record(tmp_path), view)
    assert [w.master_state for w in status.workers] == ["ALIVE", "DEAD"]
    assert status.alive_workers == 2
    assert status.active_apps == ("tidemark-demo",)
    assert status.master_reachable
    assert not status.master_alive  # the fake pids do not exist
    assert status.spark_conf["spark.master"] == "spark://127.0.0.1:7077"
    assert status.spark_conf["spark.driver.host"] == "127.0.0.1"


def test_status_without_master_answer(tmp_path: Path) -> None:
    status = status_from(_record(tmp_path), None)
    assert not status.master_reachable
    assert status.alive_workers == 0
    assert all(w.master_state is None and not w.process_alive for w in status.workers)


def test_master_json_only_queries_loopback() -> None:
    with pytest.raises(ClusterError, match=r"127\.0\.0\.1"):
        master_json("http://example.com:8080")
    # Nothing listens on a port that was just free: None, not an exception.
    assert master_json(f"http://127.0.0.1:{free_port()}", timeout=0.5) is None


def test_is_ours_rejects_a_reused_pid() -> None:
    me = os.getpid()
    ticks = start_ticks(me)
    if ticks is None:
        pytest.skip("no /proc on this platform: pid reuse cannot be detected")
    same = ProcessRecord(Role.WORKER, 1, me, ticks, 1, 2, "x")
    reused = ProcessRecord(Role.WORKER, 1, me, ticks + 1, 1, 2, "x")
    assert is_ours(same)
    assert not is_ours(reused)
    assert not is_ours(ProcessRecord(Role.WORKER, 1, 2**22 + 12345, None, 1, 2, "x"))


def test_stop_signals_only_a_recorded_live_process_group() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = ProcessRecord(Role.WORKER, 1, child.pid, start_ticks(child.pid), 1, 2, "x")
        wrong = ProcessRecord(Role.WORKER, 1, child.pid, (start_ticks(child.pid) or 0) + 7, 1, 2, "x")
        if wrong.start_ticks != record.start_ticks:
            assert stop(wrong, timeout=1) == "gone"  # a pid that is not ours is left alone
            assert child.poll() is None
        assert stop(record, timeout=10) == "stopped"
        child.wait(timeout=5)  # stop() already reaped it, so its exit status is gone
        assert not is_ours(record)
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"workers": 0}, "--workers"), ({"cores": 0}, "--cores"), ({"memory": "100m"}, "too small")],
)
def test_up_rejects_bad_requests_before_starting_anything(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        cluster_up(tmp_path / "run", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_commands_on_a_folder_without_cluster_say_how_to_start_one(tmp_path: Path) -> None:
    for command in (cluster_status, cluster_down):
        with pytest.raises(ClusterError, match="tidemark cluster up"):
            command(tmp_path)


def test_up_refuses_when_a_recorded_daemon_still_runs(tmp_path: Path) -> None:
    me = os.getpid()
    record = _record(tmp_path, (me, 999_992, 999_993))
    live = ProcessRecord(Role.MASTER, 0, me, start_ticks(me), 7077, 8080, "x")
    record = ClusterRecord(record.run_dir, record.master_url, record.webui_url, 1, "1024m", (live, *record.workers))
    (tmp_path / "cluster.json").write_text(record.to_json())
    with pytest.raises(ClusterError, match="already running"):
        cluster_up(tmp_path)


def test_kill_worker_with_unknown_index(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(_record(tmp_path).to_json())
    with pytest.raises(UsageError, match="no worker 5"):
        kill_worker(tmp_path, 5)
    with pytest.raises(ClusterError, match="not running"):
        kill_worker(tmp_path, 1)


def test_cli_status_json_and_error_exit_code(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(_record(tmp_path).to_json())
    from tidemark.cli.main import main

    code = main(["cluster", "status", "--run-dir", str(tmp_path), "--json"])
    assert code == 0
    code = main(["cluster", "status", "--run-dir", str(tmp_path / "none")])
    assert code == 1
    shown = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.main", "cluster", "status", "--run-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(shown.stdout)
    assert data["master_url"] == "spark://127.0.0.1:7077"
    assert [w["name"] for w in data["workers"]] == ["worker-1", "worker-2"]
    assert data["master_reachable"] is False


def test_cli_tables_render_status_and_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cluster.json").write_text(_record(tmp_path).to_json())
    from tidemark.cli.main import main

    assert main(["cluster", "status", "--run-dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "spark://127.0.0.1:7077" in shown
    assert "worker-1" in shown and "worker-2" in shown
    assert "0 of 2 workers alive" in shown
    assert main(["cluster", "down", "--run-dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "master was not running" in shown
