"""CLI commands for a local standalone Spark cluster: `tidemark cluster up|down|status|kill-worker`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from tidemark.cli.output import err, out, print_json

if TYPE_CHECKING:
    from tidemark.cluster import ClusterStatus, StopResult

RunDir = Annotated[
    str, typer.Option("--run-dir", help="Folder holding the cluster's pids, logs and work dirs.", show_default=True)
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
_DEFAULT_RUN_DIR = ".tidemark-cluster"

cluster_app = typer.Typer(
    help="A local Spark standalone cluster (master + workers on 127.0.0.1) to try and test cluster mode.",
    no_args_is_help=True,
)


def _render_status(status: ClusterStatus) -> None:
    from rich.table import Table

    state = "[green]up[/green]" if status.master_alive and status.master_reachable else "[red]down[/red]"
    out.print(f"master {status.master_url} ({state}, pid {status.master_pid}), web UI {status.webui_url}")
    table = Table("worker", "pid", "process", "in master", "cores", "memory")
    for worker in status.workers:
        process = "[green]running[/green]" if worker.process_alive else "[red]gone[/red]"
        seen = worker.master_state or "-"
        colour = "green" if seen == "ALIVE" else "red"
        memory = f"{worker.memory_mb}m" if worker.memory_mb is not None else "-"
        cores = str(worker.cores) if worker.cores is not None else "-"
        table.add_row(worker.name, str(worker.pid), process, f"[{colour}]{seen}[/{colour}]", cores, memory)
    out.print(table)
    out.print(
        f"{status.alive_workers} of {len(status.workers)} workers alive; run folder {escape(str(status.run_dir))}"
    )
    if status.active_apps:
        out.print(f"running applications: {', '.join(status.active_apps)}")
    if status.master_alive:
        conf = "\n".join(f'  "{k}" = "{v}"' for k, v in status.spark_conf.items() if k != "spark.master")
        snippet = f'  [spark]\n  master = "{status.master_url}"\n\n  [spark.conf]\n{conf}'
        out.print("use it from a pipeline config (and run with SPARK_LOCAL_IP=127.0.0.1):")
        out.print(snippet, markup=False)


def _render_stop(result: StopResult) -> None:
    for name in result.stopped:
        out.print(f"stopped {name}")
    for name in result.forced:
        out.print(f"[yellow]killed {name}[/yellow] (it did not stop on SIGTERM)")
    for name in result.already_gone:
        out.print(f"{name} was not running")


@cluster_app.command("up")
def up(
    run_dir: RunDir = _DEFAULT_RUN_DIR,
    workers: Annotated[int, typer.Option("--workers", "-n", help="How many workers to start.")] = 2,
    cores: Annotated[int, typer.Option("--cores", help="Cores each worker offers.")] = 1,
    memory: Annotated[str, typer.Option("--memory", help="Memory each worker offers, e.g. 1g.")] = "1g",
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for all workers.")] = 90.0,
    as_json: Json = False,
) -> None:
    """Start a master and N workers on 127.0.0.1; wait until every worker is ALIVE."""
    from tidemark.cluster import cluster_up

    err.print(f"starting a master and {workers} worker(s) from {escape(str(run_dir))} ...")
    status = cluster_up(run_dir, workers=workers, cores=cores, memory=memory, timeout=timeout)
    if as_json:
        print_json(status)
    else:
        _render_status(status)


@cluster_app.command("down")
def down(run_dir: RunDir = _DEFAULT_RUN_DIR, as_json: Json = False) -> None:
    """Stop the daemons this run folder started (by recorded pid; nothing else is touched)."""
    from tidemark.cluster import cluster_down

    result = cluster_down(run_dir)
    if as_json:
        print_json(result)
    else:
        _render_stop(result)


@cluster_app.command("status")
def status(run_dir: RunDir = _DEFAULT_RUN_DIR, as_json: Json = False) -> None:
    """Show the master URL and each worker's process and state in the master."""
    from tidemark.cluster import cluster_status

    result = cluster_status(run_dir)
    if as_json:
        print_json(result)
    else:
        _render_status(result)


@cluster_app.command("kill-worker")
def kill_worker(
    index: Annotated[int, typer.Argument(help="Worker number as shown by status (1-based).")],
    run_dir: RunDir = _DEFAULT_RUN_DIR,
    graceful: Annotated[bool, typer.Option("--graceful", help="SIGTERM instead of SIGKILL.")] = False,
    as_json: Json = False,
) -> None:
    """Kill one worker and its executors, to see a pipeline survive a lost machine."""
    from tidemark.cluster import kill_worker as kill

    result = kill(run_dir, index, graceful=graceful)
    if as_json:
        print_json(result)
    else:
        out.print(f"killed {result.name} (pid {result.pid}); master now sees it as {result.master_state or '-'}")


def register(app: typer.Typer) -> None:
    """Add the `cluster` command group to the root app."""
    app.add_typer(cluster_app, name="cluster")
